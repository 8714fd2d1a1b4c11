"""What operators do and ask: decisions, deadlines, follow-ups, edit prompts,
names, rooms, Retry, and the updates already acted on."""
