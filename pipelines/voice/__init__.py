"""The tells a reader notices in a draft, found without a model or a network call: rules
(`rules`), the built-in set (`builtin`), the counts (`counts`) and the lint (`lint`)."""
