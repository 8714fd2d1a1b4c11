"""The machinery under the units: the Store both backends share, SQLite's and
PostgreSQL's, the writer and its lanes, migrations, start-up recovery, the data
directory, backups and the copy to PostgreSQL."""
