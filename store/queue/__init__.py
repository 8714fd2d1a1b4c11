"""The publishing queue: slots of named schedules, fired once each.

store.queue.machine declares the slot states and their rules; store.queue.slots writes
a slot's transitions with their events; store.queue.holdings changes what open slots
hold (the queue: assign, swap, pull, post now, the substitution walk, expiry).
"""
