"""Org settings, members, API keys and the user profile."""
