"""The wiki: a tree of Markdown pages per org.

Modules: ``models``, ``services``, ``views`` (web UI) and ``internal`` (JSON for the assistant).
"""
