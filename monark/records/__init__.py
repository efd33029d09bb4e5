"""The records workspace: models, their fields, and records.

Modules: ``models`` (tables), ``values`` (checking values against fields), ``services``
(models, fields, one record), ``queries`` (lists: search, filter, pages), ``views`` (web UI),
``schemas`` and ``previews`` (for the API's routes and the assistant's cards).
"""
