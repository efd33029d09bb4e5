"""The org's AI model settings (admins): provider, model, key, base URL, limits; a Test
connection button, the provider's model list, and the providers as JSON."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, jsonify, render_template, request

from monark.chat.llm.providers import PROVIDERS, endpoint_of
from monark.chat.runtime import ResolvedAi
from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.web import see_other
from monark.settings import ai_form, ai_provider, prompts

bp = Blueprint("settings_ai", __name__, url_prefix="/settings/ai")
# What the providers' JSON shows of each descriptor: no code, no secrets.
SHOWN = (
    "id",
    "label",
    "needs_key",
    "key_env",
    "default_base_url",
    "token_param",
    "context_window",
    "caching",
    "local",
    "default_model",
)


def provider_summaries() -> list[dict[str, Any]]:
    """Every provider, as an admin's JSON shows it."""
    return [{name: getattr(p, name) for name in SHOWN} for p in PROVIDERS]


def _page(errors: dict[str, str] | None = None, status: int = 200, prompt_error: str | None = None):
    principal = require_principal()
    resolved = ai_provider.resolve(principal.org_id)
    deployment = ai_provider.resolve(None)
    return render_template(
        "settings/ai.html",
        stored=ai_provider.org_settings(principal.org_id),
        resolved=resolved,
        endpoint=endpoint_of(resolved.config),
        deployment=deployment,
        providers=PROVIDERS,
        caps=ai_provider.caps(),
        errors=errors or {},
        form=request.form if errors else None,
        prompts=prompts.list_prompts(principal.org_id),
        prompt_error=prompt_error,
        prompt_text=request.form.get("text", "") if prompt_error else "",
    ), status


LABELS = {
    "provider": "Provider",
    "model": "Model",
    "api_key": "API key",
    "base_url": "Base URL",
    "max_steps": "Model steps per turn",
    "max_tokens": "Tokens per reply",
    "price_input": "Input price",
    "price_output": "Output price",
    "price_cache_write": "Cache write price",
    "price_cache_read": "Cache read price",
}


def _named(err: ValidationFailed) -> str:
    """The form's problems on one line, each after its field's label."""
    named = [
        f"{LABELS.get(str(d.get('field')), d.get('field'))}: {d.get('message')}"
        for d in err.details
    ]
    return "; ".join(named) or err.message


def _form() -> ai_form.AiSettingsForm:
    fields = ai_form.AiSettingsForm.model_fields
    data: dict[str, object] = {k: request.form.get(k, "") for k in fields if k != "clear_key"}
    data["clear_key"] = request.form.get("clear_key") == "on"
    return ai_form.parse_form(data)


def _draft() -> tuple[ResolvedAi | None, str]:
    """What the posted form would resolve to were it saved, or its problems on one line."""
    try:
        return ai_form.form_config(require_principal(), _form()), ""
    except ValidationFailed as err:
        return None, _named(err)


@bp.route("", methods=["GET", "POST"])
@guard("org.manage")
def page():
    """The org's AI settings; a save keeps the key unless a new one is typed or it is removed."""
    if request.method == "POST":
        try:
            changed = ai_form.save(require_principal(), _form())
        except ValidationFailed as err:
            return _page(err.field_errors(), 422)
        flash("AI settings saved." if changed else "Nothing changed.", "info")
        return see_other("settings_ai.page")
    return _page()


@bp.post("/test")
@guard("org.manage")
def test():
    """Send a tiny request with the form's values; the answer, or the error in plain words."""
    resolved, problem = _draft()
    if resolved is None:
        return render_template("settings/_ai_test.html", ok=False, message=problem), 422
    ok, message = ai_form.test_connection(resolved)
    return render_template("settings/_ai_test.html", ok=ok, message=message)


@bp.post("/models")
@guard("org.manage")
def models():
    """The provider's models for the form's values, as the model field's suggestions."""
    resolved, problem = _draft()
    if resolved is None:
        return render_template("settings/_ai_models.html", models=[], problem=problem)
    found, problem = ai_form.model_catalogue(resolved)
    return render_template("settings/_ai_models.html", models=found, problem=problem)


@bp.get("/providers")
@guard("org.manage")
def providers():
    """The providers Monark can talk to, without code or secrets (JSON)."""
    return jsonify({"providers": provider_summaries()})


@bp.post("/prompts")
@guard("org.manage")
def add_prompt():
    """Save a prompt that every new conversation of the org offers."""
    try:
        prompts.add_prompt(require_principal(), request.form.get("text", ""))
    except ValidationFailed as err:
        return _page(status=422, prompt_error=err.field_errors().get("text"))
    flash("Prompt saved: new conversations offer it.", "info")
    return see_other("settings_ai.page", _anchor="prompts")


@bp.post("/prompts/<int:prompt_id>/delete")
@guard("org.manage")
def remove_prompt(prompt_id: int):
    """Remove a saved prompt."""
    prompts.remove_prompt(require_principal(), prompt_id)
    flash("Prompt removed.", "info")
    return see_other("settings_ai.page", _anchor="prompts")
