"""The failure history: a SQLite record of every run, triage and the quarantine list."""
