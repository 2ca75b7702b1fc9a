"""``selfheal mcp``: the MCP server for coding agents (docs/mcp.md). ``tools.py`` holds the
operations (no SDK), ``digest.py`` their bounded text (pure), ``server.py`` the SDK binding."""
