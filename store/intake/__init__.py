"""What comes in: dedup memory, the run log, the scheduler's timetable, dropped
items and the trigger's tokens."""
