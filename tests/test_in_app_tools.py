"""The in-app-only tools (automations, wiki tree, navigate) through the assistant's loop."""

from __future__ import annotations

import copy

import pytest
from sqlalchemy import select

from monark.api.openapi import build_openapi
from monark.api.routes import V1_ROUTES
from monark.approvals import service as approval_service
from monark.assistant.navigate import NavigateTool
from monark.automations.models import Automation
from monark.automations.routes import AUTOMATION_ROUTES
from monark.chat.models import ToolCall
from monark.chat.turn.start import SendInput, send_message
from monark.extensions import db
from monark.wiki import services as wiki
from monark.wiki.models import WikiPage
from monark.wiki.routes import WIKI_ROUTES
from tests.llm_script import Call, Say

VALID = {
    "nodes": [
        {"id": "t", "type": "record.created", "config": {"model": "tasks"}},
        {"id": "note", "type": "add_audit_note", "config": {"note": "Task {{record.id}} made"}},
    ],
    "edges": [{"from": "t", "to": "note"}],
}
INVALID = {
    "nodes": [
        {"id": "t", "type": "record.created", "config": {"model": "nope"}},
        {"id": "x", "type": "teleport", "config": {}},
    ],
    "edges": [{"from": "t", "to": "ghost"}],
}


def calls(conversation_id: int) -> list[ToolCall]:
    db.session.rollback()
    stmt = select(ToolCall).where(ToolCall.conversation_id == conversation_id).order_by(ToolCall.id)
    return list(db.session.scalars(stmt))


def test_the_model_fixes_an_invalid_graph_before_the_user_confirms(world, scripted):
    admin = world.a.principal("admin")
    scripted.script.add(
        [Call("automation_list_node_types")],
        [Call("automation_create", {"name": "Note new tasks", "graph": INVALID})],
        [Call("automation_create", {"name": "Note new tasks", "graph": VALID})],
        [Say("Created, and it starts disabled.")],
    )
    proposed = send_message(admin, SendInput(text="Note every new task in the audit log"))
    assert proposed.status == "awaiting_confirmation"
    types, invalid, valid = calls(proposed.conversation_id)
    assert types.status == "SUCCEEDED"
    assert {t["type"] for t in types.result["node_types"]} >= {"record.created", "add_audit_note"}
    # The invalid graph never reached a card: the model got the problem list at once.
    assert invalid.status == "FAILED" and invalid.decided_by_id is None
    for where in ("nodes[t].config.model", "nodes[x].type", "ghost"):
        assert where in invalid.error
    seen = scripted.requests[2].messages[-1].content[0]
    assert seen.is_error and "nodes[x].type" in seen.content
    assert db.session.scalar(select(Automation)) is None
    assert valid.status == "PROPOSED"
    assert valid.preview["headline"] == "create the automation “Note new tasks”"
    done = approval_service.confirm_tool_call(admin, valid.id)
    assert done.status == "done"
    automation = db.session.scalar(select(Automation))
    assert automation.name == "Note new tasks" and not automation.enabled


def test_a_member_confirming_an_automation_create_gets_a_permission_failure(world, scripted):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("automation_create", {"name": "Sneaky", "graph": VALID})],
        [Say("You may not create automations.")],
    )
    proposed = send_message(member, SendInput(text="Make an automation"))
    (call,) = calls(proposed.conversation_id)
    assert call.status == "PROPOSED"
    # The permission is read from the endpoint's own guard, so the card can warn.
    assert "lacks automation.create" in call.preview["warning"]
    approval_service.confirm_tool_call(member, call.id)
    (call,) = calls(proposed.conversation_id)
    assert call.status == "FAILED" and "automation.create" in call.error
    assert db.session.scalar(select(Automation)) is None


def test_an_update_card_shows_each_changed_node_and_a_webhook_url_whole(world, scripted):
    from monark.automations import services as automations

    admin = world.a.principal("admin")
    hook = {"url": "https://hooks.example.com/T0/B0/good", "timeout_seconds": 5}
    before = {
        "nodes": [
            *VALID["nodes"],
            {"id": "hook", "type": "send_webhook", "config": hook},
        ],
        "edges": [*VALID["edges"], {"from": "t", "to": "hook"}],
    }
    automation = automations.create_automation(admin, "Notify Slack", before)
    evil = "https://attacker.example/" + "x" * 400  # longer than any truncation
    after = copy.deepcopy(before)
    after["nodes"][2]["config"]["url"] = evil
    scripted.script.add(
        [Call("automation_update", {"automation_id": automation.id, "graph": after})]
    )
    proposed = send_message(admin, SendInput(text="Tidy the Slack automation"))
    (call,) = calls(proposed.conversation_id)
    # Only the changed node is listed, before and after, with the whole URL.
    assert call.preview["changes"] == [
        {
            "field": "Node hook",
            "before": "send_webhook: POST https://hooks.example.com/T0/B0/good "
            '{"timeout_seconds": 5}',
            "after": f'send_webhook: POST {evil} {{"timeout_seconds": 5}}',
        }
    ]


def test_a_create_card_lists_every_node_and_edge(world, scripted):
    admin = world.a.principal("admin")
    scripted.script.add([Call("automation_create", {"name": "Note new tasks", "graph": VALID})])
    proposed = send_message(admin, SendInput(text="Note every new task"))
    (call,) = calls(proposed.conversation_id)
    assert call.preview["changes"] == [
        {"field": "Node t", "after": 'record.created {"model": "tasks"}'},
        {"field": "Node note", "after": 'add_audit_note {"note": "Task {{record.id}} made"}'},
        {"field": "Edges", "after": "t → note"},
        {"field": "Enabled", "after": "no"},
    ]


@pytest.fixture
def tree(world):
    editor = world.a.principal("member")
    handbook = wiki.create_page(editor, "Handbook", "📘")
    wiki.create_page(editor, "Onboarding", "👋", handbook.id, "# Welcome aboard")
    return handbook


def test_the_wiki_tree_and_a_page_body_are_reads(world, scripted, tree):
    scripted.script.add(
        [Call("wiki_list_pages")], [Call("wiki_get_page", {"page_id": tree.id})], [Say("Done.")]
    )
    result = send_message(world.a.principal("viewer"), SendInput(text="What's in the wiki?"))
    assert result.status == "done"
    listing, page = calls(result.conversation_id)
    assert not listing.mutates and listing.status == "SUCCEEDED"
    assert listing.result["pages"][0]["title"] == "Handbook"
    assert listing.result["pages"][0]["children"][0]["title"] == "Onboarding"
    assert page.result["title"] == "Handbook" and "body" in page.result


def test_a_rename_is_proposed_with_before_and_after_then_confirmed(world, scripted, tree):
    member = world.a.principal("member")
    scripted.script.add(
        [Call("wiki_rename_page", {"page_id": tree.id, "title": "Staff handbook"})],
        [Say("Renamed.")],
    )
    proposed = send_message(member, SendInput(text="Rename the handbook"))
    (call,) = calls(proposed.conversation_id)
    assert call.status == "PROPOSED" and call.mutates
    assert call.preview["changes"] == [
        {"field": "Title", "before": "Handbook", "after": "Staff handbook"}
    ]
    assert db.session.get(WikiPage, tree.id).title == "Handbook"
    approval_service.confirm_tool_call(member, call.id)
    db.session.rollback()
    assert db.session.get(WikiPage, tree.id).title == "Staff handbook"


def test_a_viewer_cannot_rename_through_the_assistant(world, scripted, tree):
    viewer = world.a.principal("viewer")
    scripted.script.add(
        [Call("wiki_rename_page", {"page_id": tree.id, "title": "Mine now"})], [Say("No.")]
    )
    proposed = send_message(viewer, SendInput(text="Rename it"))
    (call,) = calls(proposed.conversation_id)
    approval_service.confirm_tool_call(viewer, call.id)
    (call,) = calls(proposed.conversation_id)
    assert call.status == "FAILED" and "wiki.edit" in call.error
    db.session.rollback()
    assert db.session.get(WikiPage, tree.id).title == "Handbook"


REJECTED_PATHS = [
    "//evil.example/models",
    "/\\evil.example",
    "https://evil.example/models",
    "javascript:alert(1)",
    "/models%2f..%2fapi",
    "/models/%2Fevil",
    "/no/such/page",
    "/api/v1/me",
    "/internal/wiki/pages",
    "/models/tasks/records/999999",
]


@pytest.mark.parametrize("path", REJECTED_PATHS)
def test_navigate_rejects_paths_outside_the_apps_pages(world, app, path):
    outcome = NavigateTool().run(world.a.principal("member"), {"path": path, "label": "There"})
    assert not outcome.ok
    assert "Cannot navigate" in outcome.error or "Invalid" in outcome.error


def test_navigate_rejects_a_page_the_user_may_not_open(world):
    outcome = NavigateTool().run(world.a.principal("member"), {"path": "/settings", "label": "S"})
    assert not outcome.ok and "may not open" in outcome.error
    private = f"/models/tasks/records/{world.a.private.id}"
    assert not NavigateTool().run(world.a.principal("viewer"), {"path": private, "label": "P"}).ok


def test_navigate_accepts_an_in_app_page_and_returns_it(world):
    path = f"/models/tasks/records/{world.a.public.id}"
    outcome = NavigateTool().run(world.a.principal("viewer"), {"path": path, "label": "Task"})
    assert outcome.ok and outcome.result == {"path": path, "label": "Task"}


IN_APP_ROUTES = (*AUTOMATION_ROUTES, *WIKI_ROUTES)


def test_in_app_tools_are_not_in_the_public_api():
    names = {r.name for r in IN_APP_ROUTES} | {"navigate"}
    document = build_openapi(V1_ROUTES)
    tools = {
        op["x-mcp-tool"]["name"]
        for item in document["paths"].values()
        for op in item.values()
        if "x-mcp-tool" in op
    }
    assert tools and not tools & names
    paths = " ".join(document["paths"])
    assert "/internal/" not in paths and "automation" not in paths and "wiki" not in paths


def test_every_in_app_tool_is_in_the_assistants_set(app):
    from monark.chat.runtime import runtime

    specs = {s.name: s for s in runtime(app).executor.specs()}
    for route in IN_APP_ROUTES:
        assert specs[route.name].mutates == (route.method != "GET")
        assert specs[route.name].input_schema["additionalProperties"] is False
