"""``selfheal stop-gate``: the loop's verdict where coding agents stop (docs/agents.md)."""
