"""A card's life in the chat: its buttons' data and routes, the taps, edits and
review actions, and the messages a card became."""
