"""The public /api/v1: its routes (``routes``, ``schemas``), their views and the OpenAPI
document (``views``, ``openapi``), and the in-process dispatcher (``dispatch``: the one
entry for tool calls, dry runs and the rehearsal of a held write)."""
