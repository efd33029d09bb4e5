"""The deployment's settings: read once into a frozen object, with defaults in one place."""

from __future__ import annotations

import dataclasses

import pytest

from monark.approvals import expiry
from monark.config import load_config
from monark.core.settings import Settings, settings


def test_the_settings_are_one_frozen_object_read_at_start(app, monkeypatch):
    first = settings(app)
    assert settings(app) is first
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.chat.approval_ttl = 1.0  # type: ignore[misc]
    # The config is read at start: changing it later reaches nothing until read again.
    monkeypatch.setitem(app.config, "CHAT_APPROVAL_TTL", 5.0)
    assert expiry.ttl_seconds() == first.chat.approval_ttl != 5.0


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


def test_a_variable_is_read_as_its_defaults_type(tmp_path, monkeypatch):
    monkeypatch.setenv("CHAT_MAX_STEPS", " 12 ")
    monkeypatch.setenv("CHAT_LLM_TIMEOUT", "")  # blank: the default
    monkeypatch.setenv("CHAT_LLM_ALLOW_PRIVATE", "yes")
    monkeypatch.setenv("CHAT_ALLOWANCE_IDLE", "90m")
    config = load_config(str(tmp_path))
    assert config["CHAT_MAX_STEPS"] == 12 and config["CHAT_LLM_TIMEOUT"] == 60.0
    assert config["CHAT_LLM_ALLOW_PRIVATE"] is True and config["CHAT_ALLOWANCE_IDLE"] == 5400


@pytest.mark.parametrize(
    ("name", "value"), [("CHAT_MAX_STEPS", "eight"), ("WEBHOOK_RETRY_JITTER", "a tenth")]
)
def test_a_number_that_is_not_one_names_its_variable(tmp_path, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError, match=f"^{name} must be a"):
        load_config(str(tmp_path))


def test_each_setting_is_read_from_its_fields_key_as_its_type(tmp_path):
    config = {**load_config(str(tmp_path)), "SECRET_KEY": "x" * 32}
    config |= {"CHAT_MAX_STEPS": "3", "CHAT_LLM_PROVIDER": " OpenAI ", "RECORDS_QUERY_TIMEOUT": 2}
    config |= {"MONARK_ASSISTANT_NAME": " ", "CHAT_CONTEXT_WINDOW": None}
    read = Settings.from_config(config)
    assert read.chat.max_steps == 3 and read.chat.llm_provider == "openai"
    assert read.chat.assistant_name == "Chrysa" and read.chat.context_window == 0
    assert read.query.seconds == 2.0 and isinstance(read.query.seconds, float)
