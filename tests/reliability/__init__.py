"""Reliability and security figures (SPEC §12, issue 7): faults, hostile input, secrets, concurrency."""
