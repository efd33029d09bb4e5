"""Monark: a multi-tenant business app with an app-owned AI assistant.

This module stays light on purpose: importing any ``monark.*`` module runs it first, and
``monark.chat`` must load without the host (views, features, the API; see
tests/test_chat_boundary.py). The app factory and everything it wires live in
``monark.factory``, imported only when an app is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask


def create_app(overrides: dict[str, Any] | None = None) -> Flask:
    """Build the app (``monark.factory.create_app``)."""
    from monark.factory import create_app as build

    return build(overrides)
