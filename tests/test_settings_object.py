"""The deployment's settings: read once into a frozen object, with defaults in one place."""

from __future__ import annotations

import dataclasses

import pytest

from monark.chat import decisions
from monark.config import load_config
from monark.core.settings import Settings, settings


def test_the_settings_are_one_frozen_object_read_at_start(app, monkeypatch):
    first = settings(app)
    assert settings(app) is first
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.chat.approval_ttl = 1.0  # type: ignore[misc]
    # The config is read at start: changing it later reaches nothing until read again.
    monkeypatch.setitem(app.config, "CHAT_APPROVAL_TTL", 5.0)
    assert decisions.ttl_seconds() == first.chat.approval_ttl != 5.0


def test_every_default_comes_from_the_config_module(tmp_path, monkeypatch):
    monkeypatch.delenv("CHAT_TURN_LEASE_SECONDS", raising=False)
    config = {**load_config(str(tmp_path)), "SECRET_KEY": "x" * 32}
    assert Settings.from_config(config).chat.turn_lease_seconds == 8.0
    del config["CHAT_TURN_LEASE_SECONDS"]
    with pytest.raises(KeyError):  # no second default to fall back on
        Settings.from_config(config)


def test_provider_keys_are_every_api_key_of_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MISTRAL_API_KEY", "sk-mistral")
    config = {**load_config(str(tmp_path)), "SECRET_KEY": "x" * 32}
    chat = Settings.from_config(config).chat
    assert chat.provider_key("MISTRAL_API_KEY") == "sk-mistral"
    assert chat.provider_key(None) == "" and chat.provider_key("NOPE_API_KEY") == ""
