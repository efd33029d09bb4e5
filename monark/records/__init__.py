"""The records workspace: models, their fields, and records.

Modules: ``models`` (tables), ``values`` (checking values against fields), ``services``
(models, fields, one record), ``queries`` (lists: search, filter, pages), ``views`` (web UI),
``index`` (the typed value index lists filter and sort on), ``sql`` (read-only queries),
``schemas`` and ``previews`` (for the API's routes and the assistant's cards).
"""

from monark.records import index  # noqa: F401  (keeps record_values in step on every flush)
