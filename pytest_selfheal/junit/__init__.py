"""junit."""
