"""Notifications: what finds a person in the app (the header's bell) and by mail."""
