"""Change a setting for a test, as another environment would set it at start.

The app reads its settings once (``monark.core.settings``); these set config keys and read
the settings anew from them, so what the test sets is what the code sees.
"""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

from monark.core import settings

_KEY = "monark.settings"


def configure(monkeypatch: pytest.MonkeyPatch, app: Flask, **values: Any) -> None:
    """Set config keys (``None``: unset) for this test; undone with ``monkeypatch``."""
    for name, value in values.items():
        if value is None:
            monkeypatch.delitem(app.config, name, raising=False)
        else:
            monkeypatch.setitem(app.config, name, value)
    monkeypatch.setitem(app.extensions, _KEY, settings.Settings.from_config(app.config))


def reconfigure(app: Flask, **values: Any) -> None:
    """Set config keys (``None``: unset) until set again, and read the settings anew."""
    for name, value in values.items():
        if value is None:
            app.config.pop(name, None)
        else:
            app.config[name] = value
    settings.install(app)
