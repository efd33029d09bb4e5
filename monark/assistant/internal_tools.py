"""In-app-only tools: automations and the wiki tree, kept off /api/v1 and MCP on purpose.

Each tool calls one of the app's internal JSON endpoints (``/internal/...``) through the
in-process dispatcher, as the user, so the endpoint's own permission check, validation
and events apply. Reads run at once; writes wait for Confirm like every other write.
They must be kept in step with ``monark/automations/internal.py`` and
``monark/wiki/internal.py`` by hand.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from flask import current_app
from pydantic import BaseModel, ValidationError

from monark.api.dispatch import dispatch
from monark.api.registry import describe_error
from monark.automations import internal as automations_api
from monark.automations.services import check_automation
from monark.chat.tools import ToolOutcome, ToolSpec
from monark.core.errors import ValidationFailed
from monark.core.ids import parse_id
from monark.core.models import MAX_ID
from monark.core.rbac import Principal
from monark.wiki import internal as wiki_api

Describer = Callable[[Principal, dict[str, Any]], dict[str, Any]]
Checker = Callable[[Principal, dict[str, Any]], list[dict[str, Any]]]


@dataclass(frozen=True)
class InternalTool:
    """One internal endpoint as a tool: ids in the path, the rest as its JSON body."""

    name: str
    description: str
    method: Literal["GET", "POST"]
    path: str  # e.g. "/internal/wiki/pages/{page_id}/rename"
    ids: tuple[tuple[str, str], ...] = ()  # (argument, description): positive integers
    body: type[BaseModel] | None = None
    headline: Describer | str = ""
    check: Checker | None = None  # extra checks before a card is shown (a graph, say)
    spec: ToolSpec = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "spec",
            ToolSpec(
                name=self.name,
                description=self.description,
                input_schema=self._schema(),
                mutates=self.method != "GET",
                action_label=self.headline if isinstance(self.headline, str) else "",
            ),
        )

    def _schema(self) -> dict[str, Any]:
        properties: dict[str, Any] = {
            name: {"type": "integer", "minimum": 1, "description": text} for name, text in self.ids
        }
        required = [name for name, _ in self.ids]
        out: dict[str, Any] = {"type": "object"}
        if self.body is not None:
            schema = self.body.model_json_schema()
            for name, prop in schema.get("properties", {}).items():
                properties[name] = {k: v for k, v in copy.deepcopy(prop).items() if k != "title"}
            required += schema.get("required", [])
            if schema.get("$defs"):
                out["$defs"] = schema["$defs"]
        out.update(properties=properties, required=required, additionalProperties=False)
        return out

    def _parse(self, arguments: dict[str, Any]) -> tuple[dict[str, int], BaseModel | None]:
        problems: list[dict[str, Any]] = []
        ids: dict[str, int] = {}
        for name, _ in self.ids:
            value = arguments.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append({"field": name, "message": "Give the id, a positive integer."})
            else:
                ids[name] = value
        rest = {k: v for k, v in arguments.items() if k not in ids and k not in dict(self.ids)}
        body = None
        if self.body is not None:
            try:
                body = self.body.model_validate(rest)
            except ValidationError as err:
                problems += [
                    {"field": ".".join(map(str, e["loc"])) or "body", "message": e["msg"]}
                    for e in err.errors(include_url=False)
                ]
        elif rest:
            problems += [{"field": k, "message": "Unknown argument."} for k in rest]
        if problems:
            raise _Invalid(problems)
        return ids, body

    def precheck(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome | None:
        """Arguments that can never work fail before the user is asked."""
        try:
            self._parse(arguments)
        except _Invalid as err:
            return _invalid(err.problems)
        if self.check is not None:
            problems = self.check(principal, arguments)
            if problems:
                count = len(problems)
                message = f"{count} problem{'s' if count > 1 else ''} to fix; nothing was saved."
                return ToolOutcome(
                    ok=False, error=describe_error(message, problems), details=problems
                )
        return None

    def run(self, principal: Principal, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            ids, body = self._parse(arguments)
        except _Invalid as err:
            return _invalid(err.problems)
        payload = body.model_dump(mode="json", exclude_unset=True) if body is not None else None
        if payload is None and self.method == "POST":
            payload = {}
        response = dispatch(principal, self.method, self.path.format(**ids), json_body=payload)
        if not response.ok:
            details = response.error_details()
            error = describe_error(response.error_message(), details)
            return ToolOutcome(ok=False, error=error, details=details)
        return ToolOutcome(ok=True, result=response.body)

    def required_permission(self) -> str | None:
        """The permission the endpoint's guard asks for (read from the view itself)."""
        path = self.path.format(**{name: 1 for name, _ in self.ids})
        endpoint, _ = current_app.url_map.bind("localhost").match(path, method=self.method)
        return getattr(current_app.view_functions[endpoint], "required_permission", None)

    def describe(self, principal: Principal, arguments: dict[str, Any]) -> dict[str, Any]:
        if callable(self.headline):
            return self.headline(principal, arguments)
        return {"headline": self.headline or f"run {self.name}"}


class _Invalid(Exception):
    def __init__(self, problems: list[dict[str, Any]]):
        self.problems = problems


def _invalid(problems: list[dict[str, Any]]) -> ToolOutcome:
    return ToolOutcome(
        ok=False, error=describe_error("Invalid arguments.", problems), details=problems
    )


# ---- previews for the cards ----------------------------------------------------------------


def _get(principal: Principal, path: str) -> dict[str, Any]:
    response = dispatch(principal, "GET", path)
    return response.body if response.ok and isinstance(response.body, dict) else {}


def _id(value: Any) -> int | None:
    """An id from the model's arguments, or None: never raw text inside a preview's path."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 < value <= MAX_ID:
        return value
    if isinstance(value, str):
        try:
            return parse_id(value, "id")
        except ValidationFailed:
            return None
    return None


def _automation(principal: Principal, automation_id: Any) -> dict[str, Any]:
    found = _id(automation_id)
    return _get(principal, f"/internal/automations/{found}") if found else {}


def _automation_name(principal: Principal, automation_id: Any) -> str:
    found = _automation(principal, automation_id)
    return f"“{found['name']}”" if found.get("name") else f"#{automation_id}"


def _page_title(principal: Principal, page_id: Any) -> tuple[str, dict[str, Any]]:
    found = _get(principal, f"/internal/wiki/pages/{_id(page_id)}") if _id(page_id) else {}
    return (f"“{found['title']}”" if found.get("title") else f"#{page_id}"), found


NODE_TEXT_LIMIT = 300


def _nodes(graph: Any) -> dict[str, dict[str, Any]]:
    """A graph's nodes by id (whatever shape the model sent)."""
    raw = graph.get("nodes") if isinstance(graph, dict) else None
    nodes = [n for n in raw if isinstance(n, dict)] if isinstance(raw, list) else []
    return {str(n.get("id")): n for n in nodes}


def _node_text(node: dict[str, Any] | None) -> str | None:
    """What a node does, in full where it matters: a webhook's URL always shows whole."""
    if node is None:
        return None
    config = node.get("config") if isinstance(node.get("config"), dict) else {}
    kind = str(node.get("type"))
    if kind == "send_webhook":
        rest = {k: v for k, v in config.items() if k != "url"}
        extra = f" {_clip(json.dumps(rest, sort_keys=True, ensure_ascii=False))}" if rest else ""
        return f"{kind}: POST {config.get('url')}{extra}"
    return _clip(f"{kind} {json.dumps(config, sort_keys=True, ensure_ascii=False)}")


def _clip(text: str) -> str:
    return text if len(text) <= NODE_TEXT_LIMIT else text[: NODE_TEXT_LIMIT - 1] + "…"


def _edges_text(graph: Any) -> str:
    raw = graph.get("edges") if isinstance(graph, dict) else None
    edges = [e for e in raw if isinstance(e, dict)] if isinstance(raw, list) else []
    parts = []
    for edge in edges:
        when = "" if edge.get("when") is None else f" (when {str(edge['when']).lower()})"
        parts.append(f"{edge.get('from')} → {edge.get('to')}{when}")
    return ", ".join(parts) or "none"


def _graph_changes(before: Any, after: Any) -> list[dict[str, Any]]:
    """One card row per node added, removed or changed (all of them for a new graph)."""
    old, new = _nodes(before), _nodes(after)
    changes = []
    for node_id in [*new, *(k for k in old if k not in new)]:
        was, now = _node_text(old.get(node_id)), _node_text(new.get(node_id))
        if was != now:
            row: dict[str, Any] = {"field": f"Node {node_id}", "after": now or "(removed)"}
            if before is not None:
                row["before"] = was or "(new)"
            changes.append(row)
    if before is None or _edges_text(before) != _edges_text(after):
        row = {"field": "Edges", "after": _edges_text(after)}
        if before is not None:
            row["before"] = _edges_text(before)
        changes.append(row)
    return changes


def _automation_create(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "headline": f"create the automation “{args.get('name', '')}”",
        "changes": [
            *_graph_changes(None, args.get("graph")),
            {"field": "Enabled", "after": "yes" if args.get("enabled") else "no"},
        ],
    }


def _automation_update(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    current = _automation(principal, args.get("automation_id"))
    changes = _graph_changes(current.get("graph") or {}, args.get("graph"))
    if args.get("name") and args["name"] != current.get("name"):
        changes.append({"field": "Name", "before": current.get("name"), "after": args["name"]})
    if not changes:
        changes.append({"field": "Graph", "after": "no change"})
    name = f"“{current['name']}”" if current.get("name") else f"#{args.get('automation_id')}"
    return {"headline": f"replace the graph of the automation {name}", "changes": changes}


def _automation_enable(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    verb = "turn on" if args.get("enabled", True) else "turn off"
    name = _automation_name(principal, args.get("automation_id"))
    return {"headline": f"{verb} the automation {name}"}


def _automation_test(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    name = _automation_name(principal, args.get("automation_id"))
    record = f" on record #{args['record_id']}" if args.get("record_id") else ""
    return {"headline": f"test-run the automation {name}{record} (its actions really run)"}


def _page_create(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    where = ""
    if args.get("parent_id"):
        where = f" under {_page_title(principal, args['parent_id'])[0]}"
    icon = f"{args['icon']} " if args.get("icon") else ""
    return {"headline": f"create the wiki page {icon}“{args.get('title', '')}”{where}"}


def _page_rename(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    title, page = _page_title(principal, args.get("page_id"))
    return {
        "headline": f"rename the wiki page {title}",
        "changes": [{"field": "Title", "before": page.get("title"), "after": args.get("title")}],
    }


def _page_icon(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    title, page = _page_title(principal, args.get("page_id"))
    return {
        "headline": f"change the icon of the wiki page {title}",
        "changes": [
            {"field": "Icon", "before": page.get("icon") or None, "after": args.get("icon") or None}
        ],
    }


def _page_move(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    title, page = _page_title(principal, args.get("page_id"))
    changes = []
    if "parent_id" in args:
        parent = args["parent_id"]
        before = page.get("path", [])[-2]["title"] if len(page.get("path", [])) > 1 else "top level"
        after = _page_title(principal, parent)[0] if parent else "top level"
        changes.append({"field": "Parent", "before": before, "after": after})
    if "position" in args:
        changes.append(
            {"field": "Position", "before": page.get("position"), "after": args["position"]}
        )
    return {"headline": f"move the wiki page {title}", "changes": changes}


def _page_archive(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    title, _ = _page_title(principal, args.get("page_id"))
    return {"headline": f"archive the wiki page {title} and its subpages"}


def _check_create(principal: Principal, args: dict[str, Any]) -> list[dict[str, Any]]:
    return check_automation(principal, args.get("name"), args.get("graph"))


def _check_update(principal: Principal, args: dict[str, Any]) -> list[dict[str, Any]]:
    return check_automation(
        principal, args.get("name"), args.get("graph"), exclude_id=args.get("automation_id")
    )


AUTOMATION_ID = (("automation_id", "The automation's id (see automation_list)."),)
PAGE_ID = (("page_id", "The page's id (see wiki_list_pages)."),)

IN_APP_TOOLS: tuple[InternalTool, ...] = (
    InternalTool(
        "automation_list",
        "List the organization's automations: name, trigger, enabled, version, last run.",
        "GET",
        "/internal/automations",
        headline="list the automations",
    ),
    InternalTool(
        "automation_get",
        "Get one automation with its whole graph, its version and its recent runs.",
        "GET",
        "/internal/automations/{automation_id}",
        ids=AUTOMATION_ID,
        headline=lambda p, a: {"headline": f"read the automation #{a.get('automation_id')}"},
    ),
    InternalTool(
        "automation_list_node_types",
        "List the node types an automation graph may use (triggers, conditions, actions), "
        "each with its config JSON schema, and the placeholders actions may use. Read this "
        "before writing a graph.",
        "GET",
        "/internal/automations/node-types",
        headline="list the automation node types",
    ),
    InternalTool(
        "automation_list_trigger_events",
        "List the events that can trigger an automation, with the organization's models and "
        "fields that triggers, conditions and actions may refer to.",
        "GET",
        "/internal/automations/trigger-events",
        headline="list the trigger events",
    ),
    InternalTool(
        "automation_create",
        'Create an automation from a whole graph {"nodes": [{"id", "type", "config"}], '
        '"edges": [{"from", "to", "when"?}]}: exactly one trigger node, then conditions and '
        "actions. The graph is checked against the live node registry first: if anything is "
        "wrong you get every problem to fix and nothing is saved. It starts disabled unless "
        "enabled is true.",
        "POST",
        "/internal/automations",
        body=automations_api.CreateBody,
        headline=_automation_create,
        check=_check_create,
    ),
    InternalTool(
        "automation_update",
        "Replace an automation's whole graph (and optionally its name), checked like "
        "automation_create. Pass the version you read so a newer change is not overwritten.",
        "POST",
        "/internal/automations/{automation_id}",
        ids=AUTOMATION_ID,
        body=automations_api.UpdateBody,
        headline=_automation_update,
        check=_check_update,
    ),
    InternalTool(
        "automation_enable",
        "Turn an automation on (enabled: true) or off (enabled: false).",
        "POST",
        "/internal/automations/{automation_id}/enabled",
        ids=AUTOMATION_ID,
        body=automations_api.EnabledBody,
        headline=_automation_enable,
    ),
    InternalTool(
        "automation_test",
        "Run an automation once now against a record (default: the newest record of its "
        "trigger's model). Its actions really happen. Returns the run with its steps.",
        "POST",
        "/internal/automations/{automation_id}/test",
        ids=AUTOMATION_ID,
        body=automations_api.TestBody,
        headline=_automation_test,
    ),
    InternalTool(
        "automation_get_run",
        "Get one run of an automation with its steps: each node's input, output and error.",
        "GET",
        "/internal/automations/runs/{run_id}",
        ids=(("run_id", "The run's id."),),
        headline=lambda p, a: {"headline": f"read automation run #{a.get('run_id')}"},
    ),
    InternalTool(
        "wiki_list_pages",
        "List the wiki's page tree: id, title, icon and children of every page.",
        "GET",
        "/internal/wiki/pages",
        headline="list the wiki pages",
    ),
    InternalTool(
        "wiki_get_page",
        "Get one wiki page with its Markdown body and its path in the tree.",
        "GET",
        "/internal/wiki/pages/{page_id}",
        ids=PAGE_ID,
        headline=lambda p, a: {"headline": f"read wiki page #{a.get('page_id')}"},
    ),
    InternalTool(
        "wiki_create_page",
        "Create a wiki page with a title, an optional emoji icon and an optional parent page. "
        "It starts with an empty body: you cannot write page bodies.",
        "POST",
        "/internal/wiki/pages",
        body=wiki_api.CreateBody,
        headline=_page_create,
    ),
    InternalTool(
        "wiki_rename_page",
        "Give a wiki page a new title.",
        "POST",
        "/internal/wiki/pages/{page_id}/rename",
        ids=PAGE_ID,
        body=wiki_api.RenameBody,
        headline=_page_rename,
    ),
    InternalTool(
        "wiki_set_icon",
        'Set a wiki page\'s emoji icon ("" removes it).',
        "POST",
        "/internal/wiki/pages/{page_id}/icon",
        ids=PAGE_ID,
        body=wiki_api.IconBody,
        headline=_page_icon,
    ),
    InternalTool(
        "wiki_move_page",
        "Move a wiki page: parent_id null for the top level (leave it out to keep the "
        "parent), position 0 for first (leave it out to go last). Never under itself.",
        "POST",
        "/internal/wiki/pages/{page_id}/move",
        ids=PAGE_ID,
        body=wiki_api.MoveBody,
        headline=_page_move,
    ),
    InternalTool(
        "wiki_archive_page",
        "Archive a wiki page and its subpages: they leave the tree.",
        "POST",
        "/internal/wiki/pages/{page_id}/archive",
        ids=PAGE_ID,
        headline=_page_archive,
    ),
)
