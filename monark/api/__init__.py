"""The public /api/v1: route registry, views, OpenAPI, API keys."""
