"""Processes sharing one store: heartbeats and leases."""
