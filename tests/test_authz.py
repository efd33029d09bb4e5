"""The authorization matrix: every route x every caller, with the exact status code.

Callers are Acme's four roles, ``signed_out`` and ``other_org``: Globex's owner, who holds
every permission, aimed at Acme's ids, where the only right answer is 404 (never 403).
The API is called with each caller's session and with each caller's API key.

Each test gets a fresh world. A row's callers share it, except where successful writes
would collide (two callers deleting the same record): those writers get a test of their
own. Sharing is safe because every cell also checks the events it caused: none for a
refusal or a read, at least one for a successful write. Every request runs in its own app
context, as in production, so one caller's identity cannot leak into the next request.

``test_every_route_has_expectations`` walks ``app.url_map`` and
``test_v1_route_matches_role_table`` walks ``V1_ROUTES``: a new route fails until it has
a row here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from bs4 import BeautifulSoup
from sqlalchemy import func, select, update

from monark.api.routes import V1_ROUTES
from monark.assistant import feedback
from monark.automations import services as automations
from monark.automations.models import Automation, AutomationRun, WebhookDelivery
from monark.chat import store
from monark.chat.models import Conversation, Message, ToolCall
from monark.core.keys import revoke_key
from monark.core.models import ApiKey, Event, Membership, User
from monark.core.rbac import ROLE_PERMISSIONS, ROLES, Principal
from monark.extensions import db
from monark.notifications import services as notifications
from monark.notifications.kinds import Kind
from monark.records import services
from monark.settings import members, prompts
from monark.wiki import services as wiki
from monark.wiki.models import WikiPage
from tests import factories

CALLERS = ("signed_out", *ROLES, "other_org")
SIGNED_IN = (*ROLES, "other_org")
AUTHS = ("session", "key")
ROUTES_BY_NAME = {route.name: route for route in V1_ROUTES}
ADMIN_SECRET = "Acme admin secret"
CHAT_TITLE = "Acme launch plans"

# How a row's successful writes relate: "none" (the route writes no data), "own" (each
# caller writes something of its own: they can share a world) or "same" (they write the
# same thing: each successful writer gets a world of its own).
Writes = Literal["none", "own", "same"]


# ---- the data every test acts on ------------------------------------------------------


@dataclass(frozen=True)
class Ctx:
    """Plain ids of Acme's data (a request under test may delete the ORM objects)."""

    public: int  # tasks record, visibility org, by the owner
    member_private: int  # tasks record, private, by the member
    admin_private: int  # tasks record, private, by the admin
    field: int  # a field of Acme's tasks (Globex has a tasks model too)
    viewer_membership: int
    viewer_key: int
    chat: int  # the member's assistant conversation
    said: int  # the member's message in it (no reply yet)
    proposal: int  # a write proposed in another conversation of the member's
    question: int  # a question (``ask_user``) waiting in a third conversation of the member's
    acme_org: int
    globex_org: int
    invite: int  # a pending invitation to Acme
    owner_user: int  # Acme's owner (whom the member may ask to approve)
    held: int  # a write of an Acme key marked "writes need approval", waiting
    reply: int  # the assistant's reply (the proposal's message) in the member's conversation
    prompt: int  # a prompt Acme's admins saved for new conversations
    feedback: int  # the member's thumbs down on that reply
    titles: tuple[str, ...]  # Acme's record and conversation titles: never in a refusal


@pytest.fixture
def ctx(world: factories.World) -> Ctx:
    a = world.a
    owner = a.principal("owner")
    # "projects" exists in Acme only: Globex cannot fall back on a model of its own.
    projects = services.create_model(owner, "projects", "Projects")
    services.add_field(owner, projects, key="name", label="Name", type="text", required=True)
    secret = factories.make_record(a.principal("admin"), a.model, ADMIN_SECRET, "private")
    chat, proposal = _member_conversations(a)
    return Ctx(
        public=a.public.id,
        member_private=a.private.id,
        admin_private=secret.id,
        field=next(f.id for f in a.model.fields if f.key == "notes"),
        viewer_membership=db.session.scalar(
            select(Membership.id).where(
                Membership.org_id == a.org.id, Membership.user_id == a.users["viewer"].id
            )
        ),
        viewer_key=_key_id(a.keys["viewer"]),
        chat=chat,
        said=_first_message_of(chat),
        proposal=proposal,
        question=_member_question(a),
        acme_org=a.org.id,
        globex_org=world.b.org.id,
        invite=members.create_invite(owner, "newcomer@example.test", "member")[0].id,
        owner_user=a.users["owner"].id,
        held=_held_write(a),
        reply=_message_of(proposal),
        prompt=prompts.add_prompt(owner, "Which tasks are overdue?").id,
        feedback=feedback.give(a.principal("member"), _message_of(proposal), "down", None).id,
        titles=(a.public.title, a.private.title, ADMIN_SECRET, CHAT_TITLE),
    )


def _member_conversations(a: factories.OrgWorld) -> tuple[int, int]:
    """The member's conversation, and a write the assistant proposed in another one."""
    member = a.principal("member")
    mine = {"author_kind": "user", "author_user_id": member.user_id, "role": "user"}
    chat = store.create_conversation(member, CHAT_TITLE)
    store.add_message(chat, member, text="Plan the launch", **mine)
    other = store.create_conversation(member, "Clean up")
    store.add_message(other, member, text="Delete the old task", **mine)
    reply = store.add_message(
        other, member.via_assistant(other.id), author_kind="agent", role="assistant", text=""
    )
    call = ToolCall(
        org_id=a.org.id,
        conversation_id=other.id,
        message_id=reply.id,
        provider_call_id="toolu_authz",
        name="records_delete",
        input={"model": "tasks", "record_id": a.public.id},
        mutates=True,
        status="PROPOSED",
    )
    db.session.add(call)
    db.session.commit()
    return chat.id, call.id


def _member_question(a: factories.OrgWorld) -> int:
    """A question the assistant asks the member (``ask_user``), waiting for an answer."""
    member = a.principal("member")
    asking = store.create_conversation(member, "Which Acme")
    reply = store.add_message(
        asking, member.via_assistant(asking.id), author_kind="agent", role="assistant", text=""
    )
    call = ToolCall(
        org_id=a.org.id,
        conversation_id=asking.id,
        message_id=reply.id,
        provider_call_id="toolu_authz_question",
        name="ask_user",
        input={"question": "Which one?", "choices": ["This", "That"]},
        mutates=False,
        status="PROPOSED",
    )
    db.session.add(call)
    db.session.commit()
    return call.id


def _owners_notification(c: Ctx) -> int:
    """A notification of Acme's owner (one is made each time: the URL names it)."""
    (made,) = notifications.notify(
        c.acme_org, [c.owner_user], Kind.MEMBER_JOINED, "membership", c.viewer_membership
    )
    db.session.commit()
    return made.id


def _held_write(a: factories.OrgWorld) -> int:
    """An Acme key's write held for approval: an update of the public task."""
    key = db.session.get(ApiKey, _key_id(a.keys["member"]))
    conversation = Conversation(
        org_id=a.org.id,
        kind="api",
        title=key.name,
        creator_id=a.users["owner"].id,
        api_key_id=key.id,
    )
    db.session.add(conversation)
    db.session.flush()
    held = store.add_message(
        conversation,
        Principal.for_api_key(key.id, a.org.id, "member"),
        author_kind="agent",
        role="assistant",
        text="",
    )
    call = ToolCall(
        org_id=a.org.id,
        conversation_id=conversation.id,
        message_id=held.id,
        provider_call_id="api_authz",
        name="records_update",
        input={"model": "tasks", "record_id": a.public.id, "values": {"notes": "held"}},
        mutates=True,
        status="PROPOSED",
    )
    db.session.add(call)
    db.session.commit()
    return call.id


def _first_message_of(conversation_id: int) -> int:
    return db.session.scalar(
        select(Message.id).where(Message.conversation_id == conversation_id).order_by(Message.seq)
    )


def _message_of(call_id: int) -> int:
    return db.session.scalar(select(ToolCall.message_id).where(ToolCall.id == call_id))


def _key_id(token: str) -> int:
    return db.session.scalar(select(ApiKey.id).where(ApiKey.prefix == token[:10]))


def _event_count() -> int:
    return db.session.scalar(select(func.count(Event.id)))


def _email(caller: str) -> str:
    return "owner@globex.test" if caller == "other_org" else f"{caller}@acme.test"


def _csrf_of(html: str) -> str:
    token = BeautifulSoup(html, "html.parser").find("input", attrs={"name": "csrf_token"})
    assert token is not None, "no csrf_token field on the page"
    return token["value"]


class Isolated:
    """Wraps a conftest Browser: each request in its own app context, as in production.

    The test's app context stays pushed for the whole test and Flask-Login caches the
    user in ``g``; without this, a second caller in one test would act as the first.
    """

    def __init__(self, app, browser):
        self.app, self.browser = app, browser

    def __getattr__(self, name: str):
        method = getattr(self.browser, name)

        def call(*args, **kwargs):
            with self.app.app_context():
                return method(*args, **kwargs)

        return call


def _web_client(caller: str, app, browser, login) -> Isolated:
    """A signed-in browser, or a signed-out one holding a valid CSRF token."""
    if caller != "signed_out":
        with app.app_context():
            return Isolated(app, login(_email(caller)))
    client = Isolated(app, browser)
    browser.csrf = _csrf_of(client.get("/login").get_data(as_text=True))
    return client


def _bearer(app, token: str):
    """``call(method, url, **kw)`` sending ``Authorization: Bearer <token>``."""
    client = app.test_client()

    def call(method: str, url: str, **kw):
        with app.app_context():
            return client.open(
                url, method=method, headers={"Authorization": f"Bearer {token}"}, **kw
            )

    return call


def _leaks(response, ctx: Ctx, caller: str) -> list[str]:
    """Acme records in a refusal, or Acme anywhere in an answer to Globex's owner."""
    body = response.get_data(as_text=True)
    found = []
    if response.status_code in (302, 401, 403, 404):
        found += [f"{caller}: the refusal shows {t!r}" for t in ctx.titles if t in body]
    if caller.endswith("other_org") and "Acme" in body:
        found.append(f"{caller}: Globex's owner was shown Acme data")
    return found


def _write_problems(slot: str, writes: Writes, success: bool, events: int) -> list[str]:
    """A refusal or a read must not write; a successful write must leave an event."""
    if (writes == "none" or not success) and events:
        return [f"{slot}: a refused or read-only request wrote {events} event(s)"]
    if writes != "none" and success and not events:
        return [f"{slot}: a successful write recorded no event"]
    return []


def row(*, signed_out: int = 302, owner: int, admin: int, member: int, viewer: int, other: int):
    """One line of the matrix: the exact status per caller."""
    return {
        "signed_out": signed_out,
        "owner": owner,
        "admin": admin,
        "member": member,
        "viewer": viewer,
        "other_org": other,
    }


def _groups(expect: dict[str, int], writes: Writes, success: set[int]) -> list[tuple[str, ...]]:
    """The slots of a row that share a world; colliding successful writers go alone."""
    alone = [s for s in expect if writes == "same" and expect[s] in success]
    shared = tuple(s for s in expect if s not in alone)
    return ([shared] if shared else []) + [(s,) for s in alone]


def _group_id(group: tuple[str, ...], everyone: int) -> str:
    return "all" if len(group) == everyone else "+".join(group)


# ---- web routes -----------------------------------------------------------------------


@dataclass(frozen=True)
class WebCase:
    endpoint: str
    method: str
    variant: str
    url: Callable[[Ctx], str]
    expect: dict[str, int]
    data: Callable[[Ctx, str], dict] = field(default=lambda c, who: {})  # per caller
    writes: Writes = "none"

    @property
    def id(self) -> str:
        return f"{self.endpoint} {self.method}" + (f" {self.variant}" if self.variant else "")


def _rec(attr: str, suffix: str = "") -> Callable[[Ctx], str]:
    """URL of an Acme tasks record page; ``attr`` names a Ctx id."""
    return lambda c: f"/models/tasks/records/{getattr(c, attr)}{suffix}"


def _url(path: str) -> Callable[[Ctx], str]:
    return lambda c: path


# fmt: off
WEB_CASES: tuple[WebCase, ...] = (
    WebCase("records.home", "GET", "", _url("/"),
            row(owner=302, admin=302, member=302, viewer=302, other=302)),
    WebCase("auth.login", "GET", "", _url("/login"),
            row(signed_out=200, owner=302, admin=302, member=302, viewer=302, other=302)),
    WebCase("auth.login", "POST", "wrong password", _url("/login"),
            row(signed_out=401, owner=401, admin=401, member=401, viewer=401, other=401),
            data=lambda c, who: {"email": "owner@acme.test", "password": "guess"}),
    # Off unless METRICS_TOKEN is set; with it, only the token opens it (tests/test_metrics.py).
    WebCase("metrics", "GET", "off", _url("/metrics"),
            row(signed_out=404, owner=404, admin=404, member=404, viewer=404, other=404)),
    WebCase("auth.logout", "POST", "", _url("/logout"),
            row(owner=302, admin=302, member=302, viewer=302, other=302)),
    # Globex's owner is no member of Acme: the switch is refused with a flash (see tenancy).
    WebCase("auth.switch_org", "POST", "to Acme", _url("/orgs/switch"),
            row(owner=302, admin=302, member=302, viewer=302, other=302),
            data=lambda c, who: {"org_id": str(c.acme_org)}),
    WebCase("records.models", "GET", "", _url("/models"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("records.model_new", "GET", "", _url("/models/new"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("records.model_new", "POST", "", _url("/models/new"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            data=lambda c, who: {"key": f"notes_{who}", "name": "Notes"}, writes="own"),
    WebCase("records.record_list", "GET", "acme-only model", _url("/models/projects/records"),
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    WebCase("records.record_new", "GET", "acme-only model", _url("/models/projects/records/new"),
            row(owner=200, admin=200, member=200, viewer=403, other=404)),
    WebCase("records.record_new", "POST", "acme-only model",
            _url("/models/projects/records/new"),
            row(owner=303, admin=303, member=303, viewer=403, other=404),
            data=lambda c, who: {"v_name": f"Launch by {who}"}, writes="own"),
    WebCase("records.record_detail", "GET", "public", _rec("public"),
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    WebCase("records.record_detail", "GET", "member's private", _rec("member_private"),
            row(owner=200, admin=200, member=200, viewer=404, other=404)),
    WebCase("records.record_detail", "GET", "admin's private", _rec("admin_private"),
            row(owner=200, admin=200, member=404, viewer=404, other=404)),
    WebCase("records.record_edit", "GET", "public", _rec("public", "/edit"),
            row(owner=200, admin=200, member=200, viewer=403, other=404)),
    WebCase("records.record_edit", "GET", "member's private", _rec("member_private", "/edit"),
            row(owner=200, admin=200, member=200, viewer=403, other=404)),
    WebCase("records.record_edit", "GET", "admin's private", _rec("admin_private", "/edit"),
            row(owner=200, admin=200, member=404, viewer=403, other=404)),
    WebCase("records.record_edit", "POST", "public", _rec("public", "/edit"),
            row(owner=303, admin=303, member=303, viewer=403, other=404),
            data=lambda c, who: {"v_title": f"Edited by {who}", "visibility": "org"},
            writes="own"),
    WebCase("records.record_edit", "POST", "admin's private", _rec("admin_private", "/edit"),
            row(owner=303, admin=303, member=404, viewer=403, other=404),
            data=lambda c, who: {"v_title": f"Edited by {who}", "visibility": "private"},
            writes="own"),
    WebCase("records.record_delete", "GET", "public", _rec("public", "/delete"),
            row(owner=200, admin=200, member=200, viewer=403, other=404)),
    WebCase("records.record_delete", "POST", "public", _rec("public", "/delete"),
            row(owner=303, admin=303, member=303, viewer=403, other=404), writes="same"),
    WebCase("records.record_delete", "POST", "admin's private",
            _rec("admin_private", "/delete"),
            row(owner=303, admin=303, member=404, viewer=403, other=404), writes="same"),
    WebCase("records.model_settings", "GET", "acme-only model", _url("/models/projects/settings"),
            row(owner=200, admin=200, member=403, viewer=403, other=404)),
    WebCase("records.model_settings", "POST", "acme-only model",
            _url("/models/projects/settings"),
            row(owner=303, admin=303, member=403, viewer=403, other=404),
            data=lambda c, who: {"name": f"Renamed by {who}"}, writes="own"),
    WebCase("records.field_add", "POST", "acme-only model", _url("/models/projects/fields"),
            row(owner=303, admin=303, member=403, viewer=403, other=404),
            data=lambda c, who: {"key": f"budget_{who}", "label": "Budget", "type": "number"},
            writes="own"),
    WebCase("records.field_update", "POST", "acme field id under tasks",
            lambda c: f"/models/tasks/fields/{c.field}",
            row(owner=303, admin=303, member=403, viewer=403, other=404),
            data=lambda c, who: {"label": f"Remarks by {who}"}, writes="own"),
    WebCase("records.field_delete", "POST", "acme field id under tasks",
            lambda c: f"/models/tasks/fields/{c.field}/delete",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="same"),
    WebCase("records.model_delete", "POST", "acme-only model", _url("/models/projects/delete"),
            row(owner=303, admin=303, member=403, viewer=403, other=404),
            data=lambda c, who: {"confirm_key": "projects"}, writes="same"),
    WebCase("settings.org_settings", "GET", "", _url("/settings"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("settings.org_settings", "POST", "", _url("/settings"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            data=lambda c, who: {"name": f"Renamed by {who}"}, writes="own"),
    WebCase("settings.member_role", "POST", "viewer to member",
            lambda c: f"/settings/members/{c.viewer_membership}/role",
            row(owner=303, admin=303, member=403, viewer=403, other=404),
            data=lambda c, who: {"role": "member"}, writes="same"),
    # Only an owner makes owners (the page offers admins no such choice).
    WebCase("settings.member_role", "POST", "viewer to owner",
            lambda c: f"/settings/members/{c.viewer_membership}/role",
            row(owner=303, admin=403, member=403, viewer=403, other=404),
            data=lambda c, who: {"role": "owner"}, writes="same"),
    WebCase("settings.member_remove", "POST", "the viewer",
            lambda c: f"/settings/members/{c.viewer_membership}/remove",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="same"),
    # A reload after the boosted form went to /settings/invites: back to the settings page.
    WebCase("settings.invite_create", "GET", "reload", _url("/settings/invites"),
            row(owner=302, admin=302, member=403, viewer=403, other=302)),
    # 201 and a page: the invitation link is shown once, in this answer only.
    WebCase("settings.invite_create", "POST", "as member", _url("/settings/invites"),
            row(owner=201, admin=201, member=403, viewer=403, other=201),
            data=lambda c, who: {"email": f"new-{who}@example.test", "role": "member"},
            writes="own"),
    # Only an owner invites owners.
    WebCase("settings.invite_create", "POST", "as owner", _url("/settings/invites"),
            row(owner=201, admin=422, member=403, viewer=403, other=201),
            data=lambda c, who: {"email": f"boss-{who}@example.test", "role": "owner"},
            writes="own"),
    WebCase("settings.invite_revoke", "POST", "",
            lambda c: f"/settings/invites/{c.invite}/revoke",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="same"),
    # The link itself is the credential (tests/test_members.py): opening it only moves its
    # token into the session; /invite with none there (or a wrong one) is 404 for all.
    WebCase("settings.invite_link", "GET", "unknown token", _url("/invite/inv_not-a-real-token"),
            row(signed_out=303, owner=303, admin=303, member=303, viewer=303, other=303)),
    WebCase("settings.invite", "GET", "none opened", _url("/invite"),
            row(signed_out=404, owner=404, admin=404, member=404, viewer=404, other=404)),
    WebCase("settings.invite", "POST", "none opened", _url("/invite"),
            row(signed_out=404, owner=404, admin=404, member=404, viewer=404, other=404),
            data=lambda c, who: {"name": "Mallory", "password": "long enough password"}),
    WebCase("settings.approval_settings", "POST", "", _url("/settings/approvals"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            # Each caller changes something: the owner turns allowances off, the admin on.
            data=lambda c, who: {"chat_allowances_enabled": "on"} if who == "admin" else {},
            writes="own"),
    WebCase("settings_ai.page", "GET", "", _url("/settings/ai"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("settings_ai.page", "POST", "", _url("/settings/ai"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            data=lambda c, who: {"model": f"model-of-{who}"}, writes="own"),
    WebCase("settings_ai.test", "POST", "no provider reachable", _url("/settings/ai/test"),
            row(owner=200, admin=200, member=403, viewer=403, other=200),
            data=lambda c, who: {"provider": "openai_compatible"}),
    WebCase("settings_ai.models", "POST", "", _url("/settings/ai/models"),
            row(owner=200, admin=200, member=403, viewer=403, other=200),
            data=lambda c, who: {"provider": "openai_compatible"}),
    WebCase("settings_ai.providers", "GET", "", _url("/settings/ai/providers"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("settings_ai.add_prompt", "POST", "", _url("/settings/ai/prompts"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            data=lambda c, who: {"text": f"A prompt of {who}"}, writes="own"),
    WebCase("settings_ai.remove_prompt", "POST", "acme's",
            lambda c: f"/settings/ai/prompts/{c.prompt}/delete",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="same"),
    # The org's usage and budget are admins'; a member's own usage is theirs (on the profile).
    WebCase("settings_usage.page", "GET", "", _url("/settings/usage"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("settings_usage.org_csv", "GET", "", _url("/settings/usage.csv"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("settings_usage.own_csv", "GET", "", _url("/profile/usage.csv"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("settings_usage.budget", "POST", "", _url("/settings/usage/budget"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            data=lambda c, who: {"monthly_cost": "12" if who == "admin" else "34"}, writes="own"),
    WebCase("settings.api_keys", "GET", "", _url("/settings/api-keys"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    # 201 and a page, not a redirect: the new token is shown once, in this answer only.
    WebCase("settings.api_keys", "POST", "viewer key", _url("/settings/api-keys"),
            row(owner=201, admin=201, member=403, viewer=403, other=201),
            data=lambda c, who: {"name": f"CI of {who}", "role": "viewer"}, writes="own"),
    # A key cannot outrank its maker: an admin asking for an owner key gets 422.
    WebCase("settings.api_keys", "POST", "owner key", _url("/settings/api-keys"),
            row(owner=201, admin=422, member=403, viewer=403, other=201),
            data=lambda c, who: {"name": f"CI of {who}", "role": "owner"}, writes="own"),
    WebCase("settings.api_key_revoke", "POST", "",
            lambda c: f"/settings/api-keys/{c.viewer_key}/revoke",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="same"),
    WebCase("settings.profile", "GET", "", _url("/profile"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    # An unticked box: each caller turns off their own assistant.
    WebCase("settings.profile", "POST", "", _url("/profile"),
            row(owner=303, admin=303, member=303, viewer=303, other=303), writes="own"),
    # Each caller changes their own password (and stays signed in); a wrong current one
    # or a bad email changes nothing.
    WebCase("settings.profile_password", "POST", "", _url("/profile/password"),
            row(owner=303, admin=303, member=303, viewer=303, other=303),
            data=lambda c, who: {"current_password": factories.PASSWORD,
                                 "new_password": f"new password of {who}"}, writes="own"),
    WebCase("settings.profile_password", "POST", "wrong current", _url("/profile/password"),
            row(owner=422, admin=422, member=422, viewer=422, other=422),
            data=lambda c, who: {"current_password": "guess", "new_password": "long enough one"}),
    WebCase("settings.profile_email", "POST", "wrong password", _url("/profile/email"),
            row(owner=422, admin=422, member=422, viewer=422, other=422),
            data=lambda c, who: {"email": f"new-{who}@example.test", "email_password": "guess"}),
    # Each caller sets their own time zone; an unknown one changes nothing.
    WebCase("settings_zones.profile_zone", "POST", "", _url("/profile/time-zone"),
            row(owner=303, admin=303, member=303, viewer=303, other=303),
            data=lambda c, who: {"time_zone": "Asia/Tokyo"}, writes="own"),
    WebCase("settings_zones.profile_zone", "POST", "unknown zone", _url("/profile/time-zone"),
            row(owner=422, admin=422, member=422, viewer=422, other=422),
            data=lambda c, who: {"time_zone": "Mars/Base"}),
    # The browser's zone at first sign-in: each caller's own, kept while they have none.
    WebCase("settings_zones.browser_zone", "POST", "", _url("/profile/time-zone/browser"),
            row(owner=200, admin=200, member=200, viewer=200, other=200),
            data=lambda c, who: {"time_zone": "Asia/Tokyo"}, writes="own"),
    # The org's default zone: admins of their own org.
    WebCase("settings_zones.org_zone", "POST", "", _url("/settings/time-zone"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            data=lambda c, who: {"time_zone": "Asia/Tokyo"}, writes="same"),
    # Notifications are each member's own, in their org: anyone signed in reads their list
    # and bell; another member's (or org's) notification is 404; mark read writes no event.
    WebCase("notifications.index", "GET", "", _url("/notifications"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("notifications.bell", "GET", "", _url("/notifications/bell"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("notifications.open_notification", "POST", "the owner's",
            lambda c: f"/notifications/{_owners_notification(c)}/open",
            row(owner=303, admin=404, member=404, viewer=404, other=404)),
    WebCase("notifications.read_all", "POST", "", _url("/notifications/read"),
            row(owner=303, admin=303, member=303, viewer=303, other=303)),
    WebCase("notifications.preferences", "POST", "", _url("/profile/notifications"),
            row(owner=303, admin=303, member=303, viewer=303, other=303),
            data=lambda c, who: {k.value: "never" for k in Kind}, writes="own"),
    WebCase("notifications.preferences", "POST", "bad value", _url("/profile/notifications"),
            row(owner=422, admin=422, member=422, viewer=422, other=422),
            data=lambda c, who: {Kind.HANDED_TO_YOU.value: "hourly"}),
    # Two-factor sign-in: the code step without a right password first goes back to /login;
    # enrolling is each caller's own (a confirm with no enrolment begun starts one).
    WebCase("auth.login_code", "GET", "none pending", _url("/login/code"),
            row(signed_out=303, owner=303, admin=303, member=303, viewer=303, other=303)),
    WebCase("auth.login_code", "POST", "none pending", _url("/login/code"),
            row(signed_out=303, owner=303, admin=303, member=303, viewer=303, other=303),
            data=lambda c, who: {"code": "123456"}),
    WebCase("settings.two_factor", "GET", "", _url("/profile/two-factor"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("settings.two_factor", "POST", "none begun", _url("/profile/two-factor"),
            row(owner=302, admin=302, member=302, viewer=302, other=302),
            data=lambda c, who: {"code": "123456"}),
    WebCase("settings.two_factor_disable", "POST", "off already",
            _url("/profile/two-factor/disable"),
            row(owner=422, admin=422, member=422, viewer=422, other=422),
            data=lambda c, who: {"disable_password": factories.PASSWORD}),
    WebCase("settings.two_factor_recovery_codes", "POST", "off: no codes",
            _url("/profile/two-factor/recovery-codes"),
            row(owner=422, admin=422, member=422, viewer=422, other=422),
            data=lambda c, who: {"recovery_password": factories.PASSWORD}),
    # Each caller's own sessions; an id that is no session of theirs is 404.
    WebCase("settings.session_revoke", "POST", "not theirs",
            _url("/profile/sessions/99999/revoke"),
            row(owner=404, admin=404, member=404, viewer=404, other=404)),
    WebCase("settings.sessions_revoke_others", "POST", "", _url("/profile/sessions/revoke-others"),
            row(owner=303, admin=303, member=303, viewer=303, other=303), writes="own"),
    # Only owners decide the org's requirement, and only once their own two-factor is on.
    WebCase("settings.two_factor_requirement", "POST", "on, own off", _url("/settings/two-factor"),
            row(owner=422, admin=403, member=403, viewer=403, other=422),
            data=lambda c, who: {"require_two_factor": "on"}),
    # Off already: saved as it was, nothing written.
    WebCase("settings.two_factor_requirement", "POST", "off", _url("/settings/two-factor"),
            row(owner=303, admin=403, member=403, viewer=403, other=303)),
    # Getting back in: open to anyone, and the same answer for everyone.
    WebCase("account.forgot", "GET", "", _url("/login/forgot"),
            row(signed_out=200, owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("account.forgot", "POST", "", _url("/login/forgot"),
            row(signed_out=200, owner=200, admin=200, member=200, viewer=200, other=200),
            data=lambda c, who: {"email": "owner@acme.test"}),
    WebCase("account.reset_link", "GET", "forged token", _url("/reset/not-a-real-token"),
            row(signed_out=303, owner=303, admin=303, member=303, viewer=303, other=303)),
    WebCase("account.reset", "GET", "forged token opened", _url("/reset"),
            row(signed_out=400, owner=400, admin=400, member=400, viewer=400, other=400)),
    WebCase("account.reset", "POST", "none opened", _url("/reset"),
            row(signed_out=400, owner=400, admin=400, member=400, viewer=400, other=400),
            data=lambda c, who: {"password": "long enough password"}),
    WebCase("account.email_link", "GET", "forged token", _url("/email/not-a-real-token"),
            row(signed_out=303, owner=303, admin=303, member=303, viewer=303, other=303)),
    WebCase("account.email_confirm", "GET", "none opened", _url("/email/confirm"),
            row(owner=400, admin=400, member=400, viewer=400, other=400)),
    WebCase("account.email_confirm", "POST", "none opened", _url("/email/confirm"),
            row(owner=400, admin=400, member=400, viewer=400, other=400)),
    # The development outbox holds every org's mail: admins of an org see it, under
    # ``flask run`` and in tests only (tests/test_mail.py).
    WebCase("outbox.index", "GET", "", _url("/dev/outbox"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("outbox.message", "GET", "no such message",
            _url("/dev/outbox/20260101T000000.000000-00000000.eml"),
            row(owner=404, admin=404, member=403, viewer=403, other=404)),
    # Search answers every member, each with what they may read (tests/test_search.py).
    WebCase("search.page", "GET", "", _url("/search?q=acme"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("search_internal.search", "GET", "", _url("/internal/search?q=acme"),
            row(signed_out=401, owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("audit.audit_log", "GET", "", _url("/audit"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    # Assistant conversations belong to their creator alone: even admins get 404.
    WebCase("assistant.conversations", "GET", "", _url("/chat/conversations"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("assistant.new_conversation", "GET", "", _url("/chat/new"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    # Each caller's own latest conversation, or a new one: never the member's for others.
    WebCase("assistant.first_screen", "GET", "member's remembered",
            lambda c: f"/chat/first?remembered={c.chat}",
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("assistant.suggested", "GET", "on the member's private record",
            lambda c: f"/chat/suggestions?page_route=/models/tasks/records/{c.member_private}",
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    # Only the conversation's owner rates its replies.
    WebCase("assistant.give_feedback", "POST", "member's reply",
            lambda c: f"/chat/messages/{c.reply}/feedback",
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"rating": "up"}, writes="own"),
    # Moderators review feedback; opening the conversation it points to is audited.
    WebCase("moderation.feedback_list", "GET", "", _url("/moderation/feedback"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("moderation.feedback_conversation", "GET", "member's feedback",
            lambda c: f"/moderation/feedback/{c.feedback}",
            row(owner=200, admin=200, member=403, viewer=403, other=404), writes="own"),
    WebCase("assistant.conversation", "GET", "member's", lambda c: f"/chat/conversations/{c.chat}",
            row(owner=404, admin=404, member=200, viewer=404, other=404)),
    WebCase("assistant.rename", "POST", "member's",
            lambda c: f"/chat/conversations/{c.chat}/rename",
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"title": f"Renamed by {who}"}, writes="own"),
    WebCase("assistant.delete", "POST", "member's",
            lambda c: f"/chat/conversations/{c.chat}/delete",
            row(owner=404, admin=404, member=200, viewer=404, other=404), writes="same"),
    # Nothing runs in the member's conversation: Stop says so (409); others do not see it.
    WebCase("assistant.stop", "POST", "member's", lambda c: f"/chat/conversations/{c.chat}/stop",
            row(owner=404, admin=404, member=409, viewer=404, other=404)),
    WebCase("assistant.follow", "GET", "member's",
            lambda c: f"/chat/conversations/{c.chat}/follow",
            row(owner=404, admin=404, member=200, viewer=404, other=404)),
    WebCase("assistant.await_decision", "GET", "member's",
            lambda c: f"/chat/conversations/{c.chat}/await",
            row(owner=404, admin=404, member=200, viewer=404, other=404)),
    WebCase("assistant.stream", "POST", "into member's", _url("/chat/stream"),
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"conversation_id": str(c.chat), "text": "Hello"}, writes="own"),
    WebCase("assistant.decide", "POST", "member's proposal", _url("/chat/decide"),
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"decision": f"reject:{c.proposal}"}, writes="own"),
    WebCase("assistant.answer", "POST", "member's question", _url("/chat/answer"),
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"choice": f"{c.question}:0"}, writes="own"),
    # The Approvals inbox: every signed-in member has one (most are empty).
    WebCase("approvals.inbox", "GET", "", _url("/approvals"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    # A proposal nobody handed over is in no inbox: 404 for everyone, its requester too.
    WebCase("approvals.decide", "POST", "member's proposal",
            lambda c: f"/approvals/{c.proposal}/decide",
            row(owner=404, admin=404, member=404, viewer=404, other=404),
            data=lambda c, who: {"decision": "reject"}),
    # A key's held write: any member whose role holds its permission may decide it.
    WebCase("approvals.decide", "POST", "key's held write",
            lambda c: f"/approvals/{c.held}/decide",
            row(owner=303, admin=303, member=303, viewer=403, other=404),
            data=lambda c, who: {"decision": "reject"}, writes="same"),
    # Only the requester hands their own proposal over.
    WebCase("approvals.hand_over", "POST", "member's proposal",
            lambda c: f"/chat/calls/{c.proposal}/hand-over",
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"approver_id": str(c.owner_user)}, writes="same"),
    # The approver's Edit of a request (here the key's held update of the public task).
    # (The panel's card endpoints, which the inbox's cards use too.)
    WebCase("assistant.call_card", "GET", "key's held write", lambda c: f"/chat/calls/{c.held}",
            row(owner=200, admin=200, member=200, viewer=403, other=404)),
    WebCase("assistant.edit_call", "GET", "key's held write",
            lambda c: f"/chat/calls/{c.held}/edit",
            row(owner=200, admin=200, member=200, viewer=403, other=404)),
    WebCase("assistant.save_edit", "POST", "key's held write",
            lambda c: f"/chat/calls/{c.held}/edit",
            row(owner=200, admin=200, member=200, viewer=403, other=404),
            data=lambda c, who: {"arg.values.notes": f"edited by {who}"}, writes="own"),
    WebCase("settings.four_eyes", "POST", "", _url("/settings/four-eyes"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            data=lambda c, who: {"four_eyes": "records_create"}, writes="same"),
    # A card's own endpoints: the member's proposal is a delete, which has nothing to edit.
    WebCase("assistant.edit_call", "GET", "member's delete",
            lambda c: f"/chat/calls/{c.proposal}/edit",
            row(owner=404, admin=404, member=409, viewer=404, other=404)),
    WebCase("assistant.save_edit", "POST", "member's delete",
            lambda c: f"/chat/calls/{c.proposal}/edit",
            row(owner=404, admin=404, member=409, viewer=404, other=404),
            data=lambda c, who: {"arg.record_id": "1"}),
    WebCase("assistant.call_card", "GET", "member's proposal",
            lambda c: f"/chat/calls/{c.proposal}",
            row(owner=404, admin=404, member=200, viewer=404, other=404)),
    WebCase("assistant.decide_group", "POST", "member's proposals", _url("/chat/decide-group"),
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"decision": f"reject:{_message_of(c.proposal)}"},
            writes="own"),
    # The member's proposal is a delete: it may never be allowed (403), and is not done, so
    # there is nothing to undo (409); nobody else sees it.
    WebCase("assistant.allow", "POST", "member's delete", _url("/chat/allow"),
            row(owner=404, admin=404, member=403, viewer=404, other=404),
            data=lambda c, who: {"tool_call_id": str(c.proposal)}),
    WebCase("assistant.undo_call", "POST", "member's proposal", _url("/chat/undo"),
            row(owner=404, admin=404, member=409, viewer=404, other=404),
            data=lambda c, who: {"tool_call_id": str(c.proposal)}),
    WebCase("assistant.revoke_allowance", "POST", "none held",
            _url("/chat/allowances/999999/revoke"),
            row(owner=404, admin=404, member=404, viewer=404, other=404)),
    WebCase("assistant.retry", "POST", "member's", _url("/chat/retry"),
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"conversation_id": str(c.chat)}, writes="own"),
    # Regenerate, Edit and versions: the member's own conversation only. Nothing answered
    # the member's message yet: nothing to regenerate (409, saying so); Edit sends a new
    # version; a conversation that never branched shows the one version it has.
    WebCase("assistant.regenerate", "POST", "member's", _url("/chat/regenerate"),
            row(owner=404, admin=404, member=409, viewer=404, other=404),
            data=lambda c, who: {"conversation_id": str(c.chat)}),
    WebCase("assistant.edit_message", "POST", "member's message", _url("/chat/edit"),
            row(owner=404, admin=404, member=200, viewer=404, other=404),
            data=lambda c, who: {"message_id": str(c.said), f"text_{c.said}": f"By {who}"},
            writes="own"),
    WebCase("assistant.show_version", "POST", "member's message",
            lambda c: f"/chat/conversations/{c.chat}/versions/{c.said}",
            row(owner=404, admin=404, member=200, viewer=404, other=404)),
    # Each caller's own panel width: a preference, written without an event.
    WebCase("assistant.panel_width", "POST", "", _url("/chat/panel/width"),
            row(owner=204, admin=204, member=204, viewer=204, other=204),
            data=lambda c, who: {"width": "480"}),
    # The API description is public: it holds no org data.
    WebCase("api.openapi", "GET", "", _url("/api/v1/openapi.json"),
            row(signed_out=200, owner=200, admin=200, member=200, viewer=200, other=200)),
    # ---- automations (web); Acme's automation and run are made by helpers at the end ----
    WebCase("automations.index", "GET", "", _url("/automations"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("automations.new", "GET", "", _url("/automations/new"),
            row(owner=200, admin=200, member=403, viewer=403, other=200)),
    WebCase("automations.new", "POST", "", _url("/automations/new"),
            row(owner=303, admin=303, member=403, viewer=403, other=303),
            data=lambda c, who: {"name": f"Audit of {who}", "graph": _authz_graph_text()},
            writes="own"),
    WebCase("automations.detail", "GET", "acme's", lambda c: f"/automations/{_automation(c)}",
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    WebCase("automations.detail", "POST", "acme's", lambda c: f"/automations/{_automation(c)}",
            row(owner=303, admin=303, member=403, viewer=403, other=404),
            data=lambda c, who: {"name": f"Renamed by {who}", "graph": _authz_graph_text()},
            writes="own"),
    WebCase("automations.set_enabled", "POST", "acme's",
            lambda c: f"/automations/{_automation(c)}/enabled",
            row(owner=303, admin=303, member=403, viewer=403, other=404),
            data=lambda c, who: {"enabled": "true"}, writes="same"),
    WebCase("automations.take_ownership", "POST", "acme's, its owner demoted",
            lambda c: f"/automations/{_orphaned_automation(c)}/owner",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="same"),
    WebCase("automations.set_private_records", "POST", "acme's",
            lambda c: f"/automations/{_automation(c)}/private-records",
            row(owner=303, admin=303, member=403, viewer=403, other=404),
            data=lambda c, who: {"private_records": "keep"}, writes="same"),
    WebCase("automations.test_run", "POST", "acme's",
            lambda c: f"/automations/{_automation(c)}/test",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="own"),
    WebCase("automations.delete", "POST", "acme's",
            lambda c: f"/automations/{_automation(c)}/delete",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="same"),
    WebCase("automations.rotate_secret", "POST", "acme's",
            lambda c: f"/automations/{_automation(c)}/signing-secret",
            row(owner=200, admin=200, member=403, viewer=403, other=404), writes="same"),
    WebCase("automations.signing_secret_page", "GET", "acme's",
            lambda c: f"/automations/{_automation(c)}/signing-secret",
            row(owner=303, admin=303, member=303, viewer=303, other=404)),
    WebCase("automations.redeliver", "POST", "acme's, a failed webhook",
            lambda c: f"/automations/{_automation(c)}/runs/{_run(c)}/deliveries/"
            f"{_ended_delivery(c)}/redeliver",
            row(owner=303, admin=303, member=403, viewer=403, other=404), writes="same"),
    WebCase("automations.runs", "GET", "acme's", lambda c: f"/automations/{_automation(c)}/runs",
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    WebCase("automations.run_detail", "GET", "acme's",
            lambda c: f"/automations/{_automation(c)}/runs/{_run(c)}",
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    # ---- automations (internal JSON for the assistant): 401 signed out, never a redirect.
    # These rows post a form, so a caller that passes the permission and tenancy checks
    # gets 400 (the body must be JSON); tests/test_automations.py covers the JSON writes.
    WebCase("automations_internal.automation_list", "GET", "", _url("/internal/automations"),
            row(signed_out=401, owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("automations_internal.automation_create", "POST", "form body",
            _url("/internal/automations"),
            row(signed_out=401, owner=400, admin=400, member=403, viewer=403, other=400)),
    WebCase("automations_internal.automation_list_node_types", "GET", "",
            _url("/internal/automations/node-types"),
            row(signed_out=401, owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("automations_internal.automation_list_trigger_events", "GET", "",
            _url("/internal/automations/trigger-events"),
            row(signed_out=401, owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("automations_internal.automation_get", "GET", "acme's",
            lambda c: f"/internal/automations/{_automation(c)}",
            row(signed_out=401, owner=200, admin=200, member=200, viewer=200, other=404)),
    WebCase("automations_internal.automation_update", "POST", "acme's, form body",
            lambda c: f"/internal/automations/{_automation(c)}",
            row(signed_out=401, owner=400, admin=400, member=403, viewer=403, other=404)),
    WebCase("automations_internal.automation_enable", "POST", "acme's, form body",
            lambda c: f"/internal/automations/{_automation(c)}/enabled",
            row(signed_out=401, owner=400, admin=400, member=403, viewer=403, other=404)),
    WebCase("automations_internal.automation_test", "POST", "acme's, form body",
            lambda c: f"/internal/automations/{_automation(c)}/test",
            row(signed_out=401, owner=400, admin=400, member=403, viewer=403, other=404)),
    WebCase("automations_internal.automation_get_run", "GET", "acme's",
            lambda c: f"/internal/automations/runs/{_run(c)}",
            row(signed_out=401, owner=200, admin=200, member=200, viewer=200, other=404)),
    # ---- the wiki (web) ----
    WebCase("wiki.index", "GET", "", _url("/wiki"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("wiki.page", "GET", "acme's", lambda c: f"/wiki/{_page(c)}",
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    WebCase("wiki.new", "GET", "", _url("/wiki/new"),
            row(owner=200, admin=200, member=200, viewer=403, other=200)),
    WebCase("wiki.new", "POST", "", _url("/wiki/new"),
            row(owner=303, admin=303, member=303, viewer=403, other=303),
            data=lambda c, who: {"title": f"Notes of {who}"}, writes="own"),
    WebCase("wiki.edit", "GET", "acme's", lambda c: f"/wiki/{_page(c)}/edit",
            row(owner=200, admin=200, member=200, viewer=403, other=404)),
    WebCase("wiki.edit", "POST", "acme's", lambda c: f"/wiki/{_page(c)}/edit",
            row(owner=303, admin=303, member=303, viewer=403, other=404),
            data=lambda c, who: {"title": f"Edited by {who}", "icon": "", "body": who},
            writes="own"),
    WebCase("wiki.move", "POST", "acme's", lambda c: f"/wiki/{_page(c)}/move",
            row(owner=303, admin=303, member=303, viewer=403, other=404),
            data=lambda c, who: {"parent_id": "", "position": "1"}, writes="own"),
    WebCase("wiki.archive", "POST", "acme's", lambda c: f"/wiki/{_page(c)}/archive",
            row(owner=303, admin=303, member=303, viewer=403, other=404), writes="same"),
    WebCase("wiki.archived", "GET", "", _url("/wiki/archived"),
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("wiki.restore", "POST", "acme's archived",
            lambda c: f"/wiki/{_archived_page(c)}/restore",
            row(owner=303, admin=303, member=303, viewer=403, other=404), writes="same"),
    # ---- the wiki (internal JSON; form bodies as above) ----
    WebCase("wiki_internal.wiki_list_pages", "GET", "", _url("/internal/wiki/pages"),
            row(signed_out=401, owner=200, admin=200, member=200, viewer=200, other=200)),
    WebCase("wiki_internal.wiki_create_page", "POST", "form body", _url("/internal/wiki/pages"),
            row(signed_out=401, owner=400, admin=400, member=400, viewer=403, other=400)),
    WebCase("wiki_internal.wiki_get_page", "GET", "acme's",
            lambda c: f"/internal/wiki/pages/{_page(c)}",
            row(signed_out=401, owner=200, admin=200, member=200, viewer=200, other=404)),
    WebCase("wiki_internal.wiki_rename_page", "POST", "acme's, form body",
            lambda c: f"/internal/wiki/pages/{_page(c)}/rename",
            row(signed_out=401, owner=400, admin=400, member=400, viewer=403, other=404)),
    WebCase("wiki_internal.wiki_set_icon", "POST", "acme's, form body",
            lambda c: f"/internal/wiki/pages/{_page(c)}/icon",
            row(signed_out=401, owner=400, admin=400, member=400, viewer=403, other=404)),
    WebCase("wiki_internal.wiki_move_page", "POST", "acme's, form body",
            lambda c: f"/internal/wiki/pages/{_page(c)}/move",
            row(signed_out=401, owner=400, admin=400, member=400, viewer=403, other=404)),
    # Archive takes no body: the form post archives.
    WebCase("wiki_internal.wiki_archive_page", "POST", "acme's",
            lambda c: f"/internal/wiki/pages/{_page(c)}/archive",
            row(signed_out=401, owner=200, admin=200, member=200, viewer=403, other=404),
            writes="same"),
)
# fmt: on


# ---- API routes -----------------------------------------------------------------------


@dataclass(frozen=True)
class ApiCase:
    route: str  # a V1_ROUTES name
    variant: str
    params: Callable[[Ctx], dict[str, Any]]
    expect: dict[str, int]  # by caller, for sessions and keys alike...
    key_expect: dict[str, int] = field(default_factory=dict)  # ...unless overridden here
    body: Callable[[str], dict] | None = None  # per slot ("session:owner")
    query: dict[str, str] | None = None

    @property
    def id(self) -> str:
        return self.route + (f" {self.variant}" if self.variant else "")

    def expected(self, caller: str, auth: str) -> int:
        if auth == "key" and caller in self.key_expect:
            return self.key_expect[caller]
        return self.expect[caller]

    def slots(self) -> dict[str, int]:
        """``{"session:owner": 200, "key:owner": 200, ...}``."""
        return {f"{a}:{c}": self.expected(c, a) for a in AUTHS for c in SIGNED_IN}


def _api_rec(attr: str) -> Callable[[Ctx], dict[str, Any]]:
    return lambda c: {"model": "tasks", "record_id": getattr(c, attr)}


def _projects(c: Ctx) -> dict[str, Any]:
    return {"model": "projects"}


def _none(c: Ctx) -> dict[str, Any]:
    return {}


def _notes_by(slot: str) -> dict:
    return {"values": {"notes": f"noted by {slot}"}}


# A key has no user, so it created nothing: a member's key does not see the member's
# private records (only roles with records.view_private do).
KEY_IS_NOBODY = {"member": 404}

# fmt: off
API_CASES: tuple[ApiCase, ...] = (
    ApiCase("me_get", "", _none,
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    ApiCase("models_list", "", _none,
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    ApiCase("models_get", "acme-only model", _projects,
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    ApiCase("records_list", "acme-only model", _projects,
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    ApiCase("records_get", "public", _api_rec("public"),
            row(owner=200, admin=200, member=200, viewer=200, other=404)),
    ApiCase("records_get", "member's private", _api_rec("member_private"),
            row(owner=200, admin=200, member=200, viewer=404, other=404),
            key_expect=KEY_IS_NOBODY),
    ApiCase("records_get", "admin's private", _api_rec("admin_private"),
            row(owner=200, admin=200, member=404, viewer=404, other=404)),
    ApiCase("records_create", "acme-only model", _projects,
            row(owner=201, admin=201, member=201, viewer=403, other=404),
            body=lambda slot: {"values": {"name": f"Launch by {slot}"}}),
    ApiCase("records_update", "public", _api_rec("public"),
            row(owner=200, admin=200, member=200, viewer=403, other=404), body=_notes_by),
    ApiCase("records_update", "member's private", _api_rec("member_private"),
            row(owner=200, admin=200, member=200, viewer=403, other=404),
            key_expect=KEY_IS_NOBODY, body=_notes_by),
    ApiCase("records_update", "admin's private", _api_rec("admin_private"),
            row(owner=200, admin=200, member=404, viewer=403, other=404), body=_notes_by),
    ApiCase("records_delete", "public", _api_rec("public"),
            row(owner=200, admin=200, member=200, viewer=403, other=404)),
    ApiCase("records_delete", "admin's private", _api_rec("admin_private"),
            row(owner=200, admin=200, member=404, viewer=403, other=404)),
    # Every caller queries its own org's tables (Globex has a tasks model too); another
    # org's model is no table at all (tests/test_records_query.py).
    ApiCase("records_query", "titles", _none,
            row(owner=200, admin=200, member=200, viewer=200, other=200),
            query={"sql": "SELECT id, title FROM tasks"}),
    ApiCase("records_query_tables", "", _none,
            row(owner=200, admin=200, member=200, viewer=200, other=200)),
    # A held write is read by its own key, or by its org's members: by no other key.
    ApiCase("approvals_get", "a key's held update", lambda c: {"approval_id": c.held},
            row(owner=200, admin=200, member=200, viewer=200, other=404),
            key_expect={"owner": 404, "admin": 404, "member": 200, "viewer": 404}),
)
# fmt: on


# ---- coverage: no route without expectations ------------------------------------------


def test_every_route_has_expectations(app):
    """Each (endpoint, method) of the url map has a matrix row, and no row is stale."""
    served = {
        (rule.endpoint, method)
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    covered = {(case.endpoint, case.method) for case in WEB_CASES}
    covered |= {
        (f"api.{case.route}", ROUTES_BY_NAME[case.route].method)
        for case in API_CASES
        if case.route in ROUTES_BY_NAME
    }
    assert sorted(served - covered) == [], "routes without authorization expectations"
    assert sorted(covered - served) == [], "expectations for routes that do not exist"
    unknown = {case.route for case in API_CASES} - set(ROUTES_BY_NAME)
    assert sorted(unknown) == [], "API rows for routes that are not in V1_ROUTES"


@pytest.mark.parametrize("route", V1_ROUTES, ids=lambda r: r.name)
def test_v1_route_matches_role_table(route):
    """Every descriptor has rows, and each row agrees with ROLE_PERMISSIONS."""
    cases = [case for case in API_CASES if case.route == route.name]
    assert cases, f"{route.name} has no rows in API_CASES"
    for case in cases:
        for auth in AUTHS:
            for role in ROLES:
                status = case.expected(role, auth)
                if route.permission in ROLE_PERMISSIONS[role]:
                    assert status in (route.status, 404), (case.id, auth, role)
                else:
                    assert status == 403, (case.id, auth, role)
            # Globex's owner holds every permission: Acme's ids must look absent, not denied.
            assert case.expected("other_org", auth) in (route.status, 404), case.id
    # The first row of a route is its plain path: every role with the permission succeeds.
    allowed = [role for role in ROLES if route.permission in ROLE_PERMISSIONS[role]]
    assert allowed, f"no role may call {route.name}"
    assert {cases[0].expected(role, "session") for role in allowed} == {route.status}


# ---- the web matrix -------------------------------------------------------------------

WEB_SUCCESS = {200, 201, 204, 303}


def _web_problems(case: WebCase, caller: str, response, url: str, ctx: Ctx) -> list[str]:
    """Everything but the status and the events that is wrong with one answer."""
    problems = _leaks(response, ctx, caller)
    status = response.status_code
    if status == 302 and caller == "signed_out" and case.endpoint != "auth.logout":
        location = urlsplit(response.headers["Location"])
        if location.path != "/login" or parse_qs(location.query).get("next") != [url]:
            problems.append(f"signed_out: sent to {response.headers['Location']}")
    page = BeautifulSoup(response.get_data(as_text=True), "html.parser")
    if status in (200, 201) and page.body is not None and caller != "signed_out":
        shown = page.select_one(".org-name")
        org = "Globex" if caller == "other_org" else "Acme"
        if shown is None or shown.get_text(strip=True) != org:
            problems.append(f"{caller}: the page is not in {org}")
    return problems


WEB_PARAMS = [
    pytest.param(case, group, id=f"{case.id}-{_group_id(group, len(CALLERS))}")
    for case in WEB_CASES
    for group in _groups(case.expect, case.writes, WEB_SUCCESS)
]


@pytest.mark.parametrize(("case", "callers"), WEB_PARAMS)
def test_web(case: WebCase, callers: tuple[str, ...], ctx: Ctx, app, browser, login, request):
    if case.endpoint.startswith("assistant."):
        request.getfixturevalue("scripted")  # the model answers in-process
    url = case.url(ctx)
    statuses, problems = {}, []
    for caller in callers:
        client = _web_client(caller, app, browser, login)
        before = _event_count()
        if case.method == "GET":
            response = client.get(url)
        else:
            response = client.post(url, data=case.data(ctx, caller))
        statuses[caller] = response.status_code
        problems += _web_problems(case, caller, response, url, ctx)
        # A GET writes nothing, unless its row says it records the reading (an audited read).
        writing = case.method != "GET" or case.writes != "none"
        success = writing and response.status_code in WEB_SUCCESS
        problems += _write_problems(caller, case.writes, success, _event_count() - before)
    assert statuses == {caller: case.expect[caller] for caller in callers}
    assert problems == []


# ---- the API matrix -------------------------------------------------------------------


def _api_url(case: ApiCase, ctx: Ctx) -> str:
    url = "/api/v1" + ROUTES_BY_NAME[case.route].path.format(**case.params(ctx))
    return url + ("?" + urlencode(case.query) if case.query else "")


def _api_problems(case: ApiCase, slot: str, response, ctx: Ctx) -> list[str]:
    """Everything but the status and the events that is wrong with one JSON answer."""
    problems = _leaks(response, ctx, slot)
    if response.mimetype != "application/json":
        return [*problems, f"{slot}: answered {response.mimetype}"]
    status, body = response.status_code, response.get_json()
    codes = {401: "unauthorized", 403: "forbidden", 404: "not_found"}
    if status in codes and body.get("error", {}).get("code") != codes[status]:
        problems.append(f"{slot}: error body {body}")
    if status == 200 and case.route == "me_get":
        org = ctx.globex_org if slot.endswith("other_org") else ctx.acme_org
        if body["org"]["id"] != org:
            problems.append(f"{slot}: /me names org {body['org']['id']}")
    params = case.params(ctx)
    if status == 200 and "record_id" in params and body["id"] != params["record_id"]:
        problems.append(f"{slot}: answered record {body['id']}")
    return problems


API_PARAMS = [
    pytest.param(case, group, id=f"{case.id}-{_group_id(group, 2 * len(SIGNED_IN))}")
    for case in API_CASES
    if case.route in ROUTES_BY_NAME
    for group in _groups(
        case.slots(),
        "same" if ROUTES_BY_NAME[case.route].method == "DELETE" else "own",
        {ROUTES_BY_NAME[case.route].status},
    )
]


@pytest.mark.parametrize(("case", "slots"), API_PARAMS)
def test_api(case: ApiCase, slots: tuple[str, ...], ctx: Ctx, world, app, login):
    route = ROUTES_BY_NAME[case.route]
    writes: Writes = "own" if route.mutates else "none"
    statuses, problems = {}, []
    for slot in slots:
        auth, caller = slot.split(":")
        if auth == "session":
            call = _web_client(caller, app, None, login).api
        elif caller == "other_org":
            call = _bearer(app, world.b.keys["owner"])
        else:
            call = _bearer(app, world.a.keys[caller])
        kwargs = {"json": case.body(slot)} if case.body else {}
        before = _event_count()
        response = call(route.method, _api_url(case, ctx), **kwargs)
        statuses[slot] = response.status_code
        problems += _api_problems(case, slot, response, ctx)
        success = response.status_code == route.status
        problems += _write_problems(slot, writes, success, _event_count() - before)
    assert statuses == {slot: case.slots()[slot] for slot in slots}
    assert problems == []


UNAUTHENTICATED = ("signed_out", "bogus_key", "not_a_key", "revoked_key", "session_and_bad_key")


@pytest.mark.parametrize("route", V1_ROUTES, ids=lambda r: r.name)
def test_api_unauthenticated(route, ctx: Ctx, world, app, browser, login):
    """No valid credential means 401 JSON; a bad key never falls back to the session."""
    case = next(c for c in API_CASES if c.route == route.name)
    revoked = world.a.keys["owner"]
    revoke_key(world.a.principal("owner"), _key_id(revoked))
    owner_session = _web_client("owner", app, None, login)
    calls = {
        "signed_out": _web_client("signed_out", app, browser, login).api,
        "bogus_key": _bearer(app, "mrk_" + "x" * 43),
        "not_a_key": _bearer(app, "hunter2"),
        "revoked_key": _bearer(app, revoked),
        "session_and_bad_key": lambda method, url, **kw: owner_session.api(
            method, url, headers={"Authorization": "Bearer mrk_bogus"}, **kw
        ),
    }
    statuses, problems = {}, []
    for how in UNAUTHENTICATED:
        kwargs = {"json": case.body(how)} if case.body else {}
        before = _event_count()
        response = calls[how](route.method, _api_url(case, ctx), **kwargs)
        statuses[how] = response.status_code
        problems += _api_problems(case, how, response, ctx)
        problems += _write_problems(how, "none", False, _event_count() - before)
    assert statuses == dict.fromkeys(UNAUTHENTICATED, 401)
    assert problems == []


# ---- CSRF stands in front of everything -----------------------------------------------


def test_api_session_write_needs_csrf(ctx: Ctx, app, login):
    """A cookie-authenticated write without X-CSRFToken is refused and changes nothing."""
    owner = _web_client("owner", app, None, login)
    owner.browser.csrf = ""
    before = _event_count()
    url = f"/api/v1/models/tasks/records/{ctx.public}"
    response = owner.api("PATCH", url, json=_notes_by("owner"))
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "bad_request"
    assert _event_count() == before


def test_web_post_without_csrf_token_stops_at_csrf(ctx: Ctx, app, browser):
    """Signed out and tokenless, a form post gets 400 from CSRF before any auth check."""
    before = _event_count()
    response = Isolated(app, browser.client).post(f"/models/tasks/records/{ctx.public}/delete")
    assert response.status_code == 400
    assert _event_count() == before


# ---- where signing in sends you -------------------------------------------------------

OFF_SITE_NEXT = [
    "https://evil.example/",
    "//evil.example/",
    "/\\evil.example/",
    "/\t/evil.example/",  # browsers drop tabs and newlines inside URLs: "//evil.example/"
    "/\n/evil.example/",
    "\t//evil.example/",
]


@pytest.mark.parametrize("target", OFF_SITE_NEXT, ids=repr)
def test_signing_in_never_sends_you_off_site(target: str, world, app, browser):
    """``next`` after sign-in is a path on this site, or the start page."""
    client = Isolated(app, browser)
    browser.csrf = _csrf_of(client.get("/login").get_data(as_text=True))
    form = {"email": "member@acme.test", "password": factories.PASSWORD}
    signed_in = client.post("/login", form, query_string={"next": target})
    again = client.get("/login", query_string={"next": target})  # already signed in
    for response in (signed_in, again):
        assert response.status_code == 302
        assert response.headers["Location"] == "/"


def test_signing_in_returns_to_the_page_asked_for(world, app, browser):
    client = Isolated(app, browser)
    sent = client.get("/models/tasks/records?q=launch")
    assert urlsplit(sent.headers["Location"]).path == "/login"
    login_page = client.get(sent.headers["Location"])
    browser.csrf = _csrf_of(login_page.get_data(as_text=True))
    form = {"email": "member@acme.test", "password": factories.PASSWORD}
    response = client.post(sent.headers["Location"], form)
    assert response.status_code == 302
    assert response.headers["Location"] == "/models/tasks/records?q=launch"


# ---- automations and the wiki: Acme's data for their rows ------------------------------
# Made on first use (Ctx predates these features), before the rows' requests count events.

AUTHZ_AUTOMATION = "Audit trail"
AUTHZ_PAGE = "Handbook"


def _acme_owner(c: Ctx) -> Principal:
    user_id = db.session.scalar(select(User.id).where(User.email == "owner@acme.test"))
    return Principal.for_user(user_id, c.acme_org, "owner")


def _orphaned_automation(c: Ctx) -> int:
    """Acme's automation owned by its member (an admin who was demoted since)."""
    automation_id = _automation(c)
    member = db.session.scalar(select(User.id).where(User.email == "member@acme.test"))
    db.session.execute(
        update(Automation).where(Automation.id == automation_id).values(owner_id=member)
    )
    db.session.commit()
    return automation_id


def _authz_graph_text() -> str:
    """A graph valid in both orgs (each has a tasks model)."""
    return json.dumps(
        {
            "nodes": [
                {"id": "t", "type": "record.created", "config": {"model": "tasks"}},
                {"id": "note", "type": "add_audit_note", "config": {"note": "{{record.id}}"}},
            ],
            "edges": [{"from": "t", "to": "note"}],
        }
    )


def _automation(c: Ctx) -> int:
    """Acme's automation (off), made on first use."""
    found = db.session.scalar(
        select(Automation.id).where(
            Automation.org_id == c.acme_org, Automation.name == AUTHZ_AUTOMATION
        )
    )
    if found:
        return found
    graph = json.loads(_authz_graph_text())
    return automations.create_automation(_acme_owner(c), AUTHZ_AUTOMATION, graph).id


def _run(c: Ctx) -> int:
    """A test run of Acme's automation, made on first use."""
    automation_id = _automation(c)
    found = db.session.scalar(
        select(AutomationRun.id).where(AutomationRun.automation_id == automation_id)
    )
    return found or automations.run_test(_acme_owner(c), automation_id).id


def _ended_delivery(c: Ctx) -> int:
    """A failed webhook delivery of Acme's run, made on first use."""
    run_id = _run(c)
    found = db.session.scalar(select(WebhookDelivery.id).where(WebhookDelivery.run_id == run_id))
    if found:
        return found
    delivery = WebhookDelivery(
        org_id=c.acme_org,
        run_id=run_id,
        automation_id=_automation(c),
        node_id="hook",
        message_id="msg_authz",
        url="http://127.0.0.1:9/hook",
        body="{}",
        timeout_seconds=1.0,
        status="failed",
        attempts=1,
        max_attempts=1,
    )
    db.session.add(delivery)
    db.session.commit()
    return delivery.id


def _archived_page(c: Ctx) -> int:
    """An archived page of Acme's, made on first use."""
    title = f"{AUTHZ_PAGE} (archived)"
    found = db.session.scalar(
        select(WikiPage.id).where(WikiPage.org_id == c.acme_org, WikiPage.title == title)
    )
    if found:
        return found
    page_id = wiki.create_page(_acme_owner(c), title, "🗄", body="Old").id
    wiki.archive_page(_acme_owner(c), page_id)
    return page_id


def _page(c: Ctx) -> int:
    """Acme's wiki page, made on first use."""
    found = db.session.scalar(
        select(WikiPage.id).where(WikiPage.org_id == c.acme_org, WikiPage.title == AUTHZ_PAGE)
    )
    return found or wiki.create_page(_acme_owner(c), AUTHZ_PAGE, "📘", body="Hello").id
