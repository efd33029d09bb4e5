"""Automations: a JSON graph (one trigger, conditions, actions) run after a domain event commits.

Modules: ``models`` (tables), ``nodes`` (node types and their config schemas), ``template``
(``{{record.title}}`` placeholders), ``graph`` (``validate_graph``), ``engine`` (the
after-commit hook and the runner), ``services`` (what views call), ``views`` (web UI) and
``internal`` (the JSON endpoints the in-app assistant's tools call).
"""
