"""Upkeep, above the nouns it tends: recovery at start-up, pruning, the copy to PostgreSQL."""
