"""The conversation substrate and the agent loop: contracts the host fills in, on ``core``
alone."""
