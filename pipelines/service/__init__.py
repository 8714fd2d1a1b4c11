"""The engine as a long-running service: its lifecycle, the scheduler and
when runs are due, supervised workers, the leader and its sealer."""
