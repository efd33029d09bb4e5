"""The host wiring of the assistant: what ``monark.chat`` needs from this app.

Modules: ``tools`` (the tool set: every declared route an agent may call, plus ``navigate``
from ``navigate`` and ``ask_user``, a question asked on a card, from ``ask_user``), ``views``
(the panel's endpoints under /chat; ``approval_views`` adds Allow, Undo and Revoke to them),
``stream`` (a turn as Server-Sent Events), ``thread`` (the panel's view data) and ``panel``
(its width limits).
"""
