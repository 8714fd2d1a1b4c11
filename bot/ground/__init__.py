"""The ground floor of bot/: logs, the storage alarm and signed buttons, for every room."""
