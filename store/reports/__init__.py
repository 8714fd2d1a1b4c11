"""Figures read for people: metrics and charts, the editor's stats, the store's
summary."""
