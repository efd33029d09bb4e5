"""The stdio MCP server for external agents: the exposed /api/v1 routes as tools, with a key.

Run it as ``monark-mcp`` (or ``python -m monark.mcp``); see ``monark.mcp.server``.
"""
