"""The conversation substrate and the agent loop.

This package defines contracts (provider, tool executor, hooks) and depends only on
``monark.core`` and ``monark.extensions``; the host injects the concrete tool executor.
"""
