"""One run of a pipeline: the engine's tick, intake, filters, triage, full text,
the HTTP trigger, retries, and the trial (dry) run."""
