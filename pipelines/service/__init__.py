"""The engine as a long-running service: its lifecycle, the scheduler, supervised workers
and the reminders, the leader and its sealer."""
