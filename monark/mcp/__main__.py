"""``python -m monark.mcp``: the same as the ``monark-mcp`` script."""

from monark.mcp.server import main

main()
