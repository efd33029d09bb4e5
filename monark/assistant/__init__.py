"""The host wiring of the assistant: its tool set, and (later) the panel and SSE endpoint."""
