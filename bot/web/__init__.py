"""The bot's HTTP surfaces: the trigger API, Prometheus metrics, charts, and their
bounded listeners."""
