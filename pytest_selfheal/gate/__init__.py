"""``selfheal stop-gate``: the loop's verdict where coding agents stop (docs/agents.md).

``agents.py`` reads the agents' hook payloads and writes their answers and settings files
(pure); ``run.py`` decides (runs the tests through the MCP server's ``run_tests``, keeps the
block budget); ``install.py`` writes the hook into the agent's settings file.
"""
