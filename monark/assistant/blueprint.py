"""The assistant's blueprint (``/chat``), with the views of every module that adds to it.

The panel's endpoints are in ``views``; the Allow, Undo and Revoke endpoints in
``approval_views``, Regenerate, Edit and the version switch in ``branch_views``, and the
cards' Edit and group decision in ``cards`` join the same
blueprint when imported, which this module does, so the factory registers one object.
"""

from __future__ import annotations

from monark.assistant import approval_views, branch_views, cards, feedback_views, views

bp = views.bp
# The modules whose views make up ``bp`` (importing each is what joins its views).
VIEW_MODULES = (views, approval_views, branch_views, cards, feedback_views)
