"""Reliability and security figures: faults, hostile input, secrets, concurrency."""
