"""The bot in conversation: the handlers' kit, what it says and to whom, who may speak,
the outbox sender and the messages it sent, and the polling of updates."""
