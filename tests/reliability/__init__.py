"""Reliability and security figures (issue 7): faults, hostile input, secrets, concurrency."""
