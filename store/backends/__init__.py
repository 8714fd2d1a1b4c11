"""The machinery under the nouns: the Store both backends share, SQLite's and
PostgreSQL's, the writer and its lanes, wake-ups across processes, migrations and
the generated schema, the data directory and backups."""
