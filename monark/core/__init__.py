"""Cross-cutting pieces: accounts and orgs, RBAC, events, errors, htmx helpers."""
