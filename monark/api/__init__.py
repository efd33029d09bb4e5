"""The public /api/v1: its routes (``routes``, ``schemas``), their views and the OpenAPI
document (``views``, ``openapi``), and the in-process dispatcher (``dispatch``)."""
