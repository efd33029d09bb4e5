"""The assistant panel's width limits, one set for the server and the panel's script.

The server keeps a stored width within ``MIN_WIDTH``..``MAX_WIDTH``; the script clamps a
drag to the same limits and leaves the page at least ``PAGE_MIN_WIDTH`` beside the panel.
The script reads them from data attributes on ``<aside id="assistant">``
(``templates/assistant/_panel.html``), written from ``panel_widths`` below.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask

from monark.chat.models import MessageRole, MessageStatus, ToolCallStatus
from monark.chat.runtime import provider_problem
from monark.core.auth import current_principal

MIN_WIDTH, MAX_WIDTH = 320, 960  # px a stored width is kept within
PAGE_MIN_WIDTH = 420  # px the page keeps beside an open panel


@dataclass(frozen=True)
class PanelWidths:
    """The panel's limits in CSS pixels."""

    min: int
    max: int
    page_min: int


PANEL_WIDTHS = PanelWidths(min=MIN_WIDTH, max=MAX_WIDTH, page_min=PAGE_MIN_WIDTH)


def setup_problem() -> str | None:
    """What keeps the signed-in user's org from having a model answer (None: nothing)."""
    principal = current_principal()
    return provider_problem(principal.org_id) if principal is not None else None


def register_panel(app: Flask) -> None:
    """Give templates the panel's limits as ``panel_widths`` (constants: no context
    processor needed, and fragments see them too), and ``assistant_setup_problem`` for
    screens that say a model is missing whichever view drew them; and the statuses and
    roles as the enums the code compares, so a template never spells one by hand."""
    app.add_template_global(PANEL_WIDTHS, "panel_widths")
    app.add_template_global(setup_problem, "assistant_setup_problem")
    for enum in (MessageRole, MessageStatus, ToolCallStatus):
        app.add_template_global(enum, enum.__name__)
