"""The bot as a process: start-up checks and the control socket."""
