"""The assistant panel's width limits, one set for the server and the panel's script.

The server keeps a stored width within ``MIN_WIDTH``..``MAX_WIDTH``; the script clamps a
drag to the same limits and leaves the page at least ``PAGE_MIN_WIDTH`` beside the panel.
The script reads them from data attributes on ``<aside id="assistant">``
(``templates/assistant/_panel.html``), written from ``panel_widths`` below.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Flask

MIN_WIDTH, MAX_WIDTH = 320, 960  # px a stored width is kept within
PAGE_MIN_WIDTH = 420  # px the page keeps beside an open panel


@dataclass(frozen=True)
class PanelWidths:
    """The panel's limits in CSS pixels."""

    min: int
    max: int
    page_min: int


PANEL_WIDTHS = PanelWidths(min=MIN_WIDTH, max=MAX_WIDTH, page_min=PAGE_MIN_WIDTH)


def register_panel(app: Flask) -> None:
    """Give templates the panel's limits as ``panel_widths`` (constants: no context
    processor needed, and fragments see them too)."""
    app.add_template_global(PANEL_WIDTHS, "panel_widths")
