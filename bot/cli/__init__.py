"""The `gatehouse` command line.

`main` parses the arguments and runs the read commands, `writes` the commands that
change state (through the running bot's control socket), `output` prints.
"""
