"""The audit log: its service (``services``) and its page (``views``)."""
