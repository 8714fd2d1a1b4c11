"""The bot as a process: start-up checks, the single-writer lock, the control
socket, logging and storage alarms."""
