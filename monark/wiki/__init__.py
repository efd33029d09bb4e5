"""The wiki: a tree of Markdown pages per org.

Modules: ``models``, ``services``, ``views`` (web UI), and the in-app assistant's routes:
``routes`` (declared once, their ``/internal`` JSON views come from them), ``schemas`` (their
bodies and answers) and ``previews`` (what their confirm cards say).
"""
