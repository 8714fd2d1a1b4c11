"""The bot in conversation: commands, what it says and to whom, who may speak, the
outbox sender and the polling of updates."""
