"""A card's life in the chat: its buttons and their routes, the taps and review actions."""
