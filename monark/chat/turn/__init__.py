"""A turn: how it starts (``start``), holds its conversation (``lease``), is kept alive
(``keeper``), runs (``run``) and reports its progress (``progress``)."""
