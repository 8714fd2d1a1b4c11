"""Pipeline files: the definitions (spec), their errors as an operator reads them,
the names they declare, paths relative to a file, and the preflight check."""
