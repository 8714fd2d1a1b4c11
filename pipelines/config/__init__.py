"""Pipeline files: the definitions (spec), their errors as an operator reads them, and
the names they declare."""
