"""Automations: a JSON graph (one trigger, conditions, actions) run after a domain event commits.

Modules: ``models`` (tables), ``nodes`` (the node registry) with ``configs`` (each node
type's config schema), ``template`` (``{{record.title}}`` placeholders), ``references`` (what
a graph may name in its org), ``graph`` (``validate_graph``), ``actions`` (what nodes do),
``engine`` (the after-commit hook and the runner), ``services`` (what views and routes
call), ``views`` (web UI), and the in-app assistant's routes: ``routes`` (declared once, their
``/internal`` JSON views come from them), ``schemas`` (their bodies and answers) and
``previews`` (what their confirm cards say).
"""
