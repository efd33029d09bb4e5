"""A turn: its start, lease, lease keeper, run and progress."""
