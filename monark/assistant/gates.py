"""The three gates before the assistant, and its one resolved name (the host's
``chat.host.AccessGate``, installed by the app factory)."""

from __future__ import annotations

from flask import has_request_context, request

from monark.chat.host import Gate
from monark.chat.runtime import runtime
from monark.core.models import Org, User
from monark.core.rbac import Principal
from monark.core.settings import chat_settings
from monark.extensions import db

__all__ = ["AssistantGates", "Gate", "assistant_name", "check_gates"]


def assistant_name(org: Org | None) -> str:
    """The org's name for it (with branding on), else the deployment's, else Chrysa."""
    if org is not None and org.branding_enabled and (org.assistant_name or "").strip():
        return org.assistant_name.strip()
    return chat_settings().assistant_name


def check_gates(principal: Principal) -> Gate:
    """Check chat.use, the org's chat module, then the AI switches (deployment, org, user)
    and the spend. A page (a GET) draws the gate in several places, the header's button, the
    panel and its screen: it is checked once for the request."""
    if not has_request_context() or request.method != "GET":
        return _checked(principal)
    # A WSGI environ's keys are strings (gunicorn's access log reads every one of them).
    key = f"monark.gate.{principal.org_id}.{principal.user_id}.{principal.role}"
    if key not in request.environ:
        request.environ[key] = _checked(principal)
    return request.environ[key]


def _checked(principal: Principal) -> Gate:
    if not principal.can("chat.use"):
        return Gate(False, "permission", "Your role does not include the assistant.", False)
    org = db.session.get(Org, principal.org_id)
    if org is None or not org.chat_enabled:
        return Gate(False, "chat_off", "Chat is turned off for this organization.", False)
    if not chat_settings().ai_agent_enabled:
        return Gate(False, "ai_off_deployment", "The AI assistant is turned off on this server.")
    if not org.ai_agent_enabled:
        return Gate(
            False, "ai_off_org", "An admin turned the AI assistant off for this organization."
        )
    user = db.session.get(User, principal.user_id) if principal.user_id else None
    if user is not None and not user.ai_agent_enabled:
        return Gate(False, "ai_off_user", "You turned the AI assistant off on your profile page.")
    if reason := runtime().spend(principal, None):  # a budget used up (the host's check)
        return Gate(False, "budget", reason)
    return Gate(True)


class AssistantGates:
    """The three gates, as chat asks for them (``chat.host.AccessGate``)."""

    def check(self, principal: Principal) -> Gate:
        """``check_gates``."""
        return check_gates(principal)
