"""The records workspace: models, their fields, and records."""
