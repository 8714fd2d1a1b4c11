"""Processes sharing one store: heartbeats, leases and wake-ups."""
