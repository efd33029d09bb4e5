"""Previews of the automations routes' tool calls for the assistant's cards, and the graph
check that runs before a card is shown. Everything is read as the user, through the
services' own permission checks; a graph's webhook URLs always show whole on a card."""

from __future__ import annotations

import json
from typing import Any

from monark.automations import services
from monark.core.ids import id_or_none
from monark.core.rbac import Principal
from monark.core.routes import found_or_none

NODE_TEXT_LIMIT = 300


def _current(principal: Principal, automation_id: Any) -> dict[str, Any]:
    """The automation's name and graph as the user may read them; empty if not theirs."""
    found = id_or_none(automation_id)
    automation = None if found is None else found_or_none(services.get_automation, principal, found)
    if automation is None:
        return {}
    return {"name": automation.name, "graph": services.shown_graph(principal, automation.graph)}


def _name(principal: Principal, automation_id: Any) -> str:
    current = _current(principal, automation_id)
    return f"“{current['name']}”" if current.get("name") else f"#{automation_id}"


def _nodes(graph: Any) -> dict[str, dict[str, Any]]:
    """A graph's nodes by id (whatever shape the model sent)."""
    raw = graph.get("nodes") if isinstance(graph, dict) else None
    nodes = [n for n in raw if isinstance(n, dict)] if isinstance(raw, list) else []
    return {str(n.get("id")): n for n in nodes}


def _clip(text: str) -> str:
    return text if len(text) <= NODE_TEXT_LIMIT else text[: NODE_TEXT_LIMIT - 1] + "…"


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


def create(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A new automation: every node and edge, and whether it starts enabled."""
    return {
        "headline": f"create the automation “{args.get('name', '')}”",
        "changes": [
            *_graph_changes(None, args.get("graph")),
            {"field": "Enabled", "after": "yes" if args.get("enabled") else "no"},
        ],
    }


def update(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A replaced graph: each node that changes, before → after, and the name."""
    current = _current(principal, args.get("automation_id"))
    changes = _graph_changes(current.get("graph") or {}, args.get("graph"))
    if args.get("name") and args["name"] != current.get("name"):
        changes.append({"field": "Name", "before": current.get("name"), "after": args["name"]})
    if not changes:
        changes.append({"field": "Graph", "after": "no change"})
    name = f"“{current['name']}”" if current.get("name") else f"#{args.get('automation_id')}"
    return {"headline": f"replace the graph of the automation {name}", "changes": changes}


def enable(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """Turning it on or off."""
    verb = "turn on" if args.get("enabled", True) else "turn off"
    return {"headline": f"{verb} the automation {_name(principal, args.get('automation_id'))}"}


def test(principal: Principal, args: dict[str, Any]) -> dict[str, Any]:
    """A test run, which really runs its actions."""
    name = _name(principal, args.get("automation_id"))
    record = f" on record #{args['record_id']}" if args.get("record_id") else ""
    return {"headline": f"test-run the automation {name}{record} (its actions really run)"}


def check_create(principal: Principal, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The graph's problems against the live node registry, before any card."""
    return services.check_automation(principal, args.get("name"), args.get("graph"))


def check_update(principal: Principal, args: dict[str, Any]) -> list[dict[str, Any]]:
    """The same for a replaced graph (its own name is not a clash)."""
    return services.check_automation(
        principal,
        args.get("name"),
        args.get("graph"),
        exclude_id=id_or_none(args.get("automation_id")),
    )
