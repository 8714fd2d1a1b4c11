"""The slash commands an operator types, answered by the functions the CLI calls."""
