"""The audit chain: events, their sealing, and signed checkpoints."""
