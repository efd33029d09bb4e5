"""How a proposed write is decided: the org's policy, one ``decide()``, edits, hand-over,
allowances and undo. Between the features and ``api`` in the layers: ``chat`` only knows
that a proposal settles once, and asks the gate installed here whether a call runs at once."""
