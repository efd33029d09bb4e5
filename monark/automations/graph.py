"""Parsing and checking a graph: ``validate_graph`` itemizes every problem by node or edge.

A graph is ``{"nodes": [{"id", "type", "config"}], "edges": [{"from", "to", "when"?}]}``.
Problems name where they are, e.g. ``nodes[notify].config.url`` or ``edges[2].to``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from monark.automations.nodes import Registry

NODE_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
MAX_NODES, MAX_EDGES = 50, 200
NODE_KEYS = ("id", "type", "config")
EDGE_KEYS = ("from", "to", "when")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a graph: where (``field``) and what (``message``)."""

    field: str
    message: str

    def as_detail(self) -> dict[str, str]:
        """The error-body shape: ``{"field", "message"}``."""
        return {"field": self.field, "message": self.message}


@dataclass
class Node:
    id: str
    where: str  # "nodes[<id>]" (or "nodes[<index>]" when the id itself is bad)
    type_key: str
    node_type: Any = None  # NodeType, when the type is known
    config: BaseModel | None = None  # when the config is valid
    raw_config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Edge:
    index: int
    source: str
    target: str
    when: bool | None  # only on edges leaving a condition


@dataclass
class Graph:
    """A parsed graph: the nodes by id (in order), the usable edges and the trigger."""

    nodes: dict[str, Node]
    edges: list[Edge]
    trigger: Node | None = None

    def outgoing(self, node_id: str) -> list[Edge]:
        """Edges leaving ``node_id``."""
        return [e for e in self.edges if e.source == node_id]

    def incoming(self, node_id: str) -> list[Edge]:
        """Edges entering ``node_id``."""
        return [e for e in self.edges if e.target == node_id]

    def reachable_from(self, start: str) -> list[str]:
        """Node ids reachable from ``start`` (itself included), breadth first."""
        seen, queue = [start], [start]
        while queue:
            for edge in self.outgoing(queue.pop(0)):
                if edge.target not in seen:
                    seen.append(edge.target)
                    queue.append(edge.target)
        return seen

    def ancestors(self, node_id: str) -> set[str]:
        """Node ids with a path to ``node_id``."""
        seen: set[str] = set()
        queue = [node_id]
        while queue:
            for edge in self.incoming(queue.pop()):
                if edge.source not in seen:
                    seen.add(edge.source)
                    queue.append(edge.source)
        return seen

    def order(self) -> list[str]:
        """The nodes reachable from the trigger in topological order (the graph is acyclic)."""
        if self.trigger is None:
            return []
        reachable = set(self.reachable_from(self.trigger.id))
        indegree = {n: 0 for n in reachable}
        for edge in self.edges:
            if edge.source in reachable and edge.target in reachable:
                indegree[edge.target] += 1
        ready = [n for n in self.nodes if n in reachable and indegree[n] == 0]
        out = []
        while ready:
            current = ready.pop(0)
            out.append(current)
            for edge in self.outgoing(current):
                indegree[edge.target] -= 1
                if indegree[edge.target] == 0:
                    ready.append(edge.target)
        return out


def _pydantic_problems(where: str, err: ValidationError) -> list[Problem]:
    out = []
    for item in err.errors(include_url=False):
        loc = ".".join(str(p) for p in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        message = message[:1].upper() + message[1:]
        if item["type"] == "extra_forbidden":
            message = "Unknown config key."
        out.append(Problem(f"{where}.config" + (f".{loc}" if loc else ""), message))
    return out


def _parse_nodes(raw_nodes: list[Any], registry: Registry) -> tuple[dict[str, Node], list[Problem]]:
    nodes: dict[str, Node] = {}
    problems: list[Problem] = []
    for index, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict):
            problems.append(Problem(f"nodes[{index}]", "A node is an object: id, type, config."))
            continue
        node_id = raw.get("id")
        if not isinstance(node_id, str) or not NODE_ID.match(node_id):
            problems.append(
                Problem(f"nodes[{index}].id", "Give an id of 1-40 letters, digits, _ or -.")
            )
            continue
        where = f"nodes[{node_id}]"
        if node_id in nodes:
            problems.append(Problem(f"{where}.id", f"Two nodes have the id {node_id!r}."))
            continue
        problems += [
            Problem(f"{where}.{key}", "Unknown key (a node has id, type and config).")
            for key in raw
            if key not in NODE_KEYS
        ]
        type_key = raw.get("type")
        node = Node(id=node_id, where=where, type_key=str(type_key))
        nodes[node_id] = node
        if not isinstance(type_key, str) or type_key not in registry:
            known = ", ".join(registry)
            problems.append(
                Problem(f"{where}.type", f"Unknown node type {type_key!r} (known: {known}).")
            )
            continue
        node.node_type = registry[type_key]
        config = raw.get("config", {})
        if not isinstance(config, dict):
            problems.append(Problem(f"{where}.config", "The config is an object."))
            continue
        node.raw_config = config
        try:
            node.config = node.node_type.config_model.model_validate(config)
        except ValidationError as err:
            problems += _pydantic_problems(where, err)
    return nodes, problems


def _when(value: Any) -> bool | str | None:
    if value is None or isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    return "bad"


def _parse_edges(raw_edges: list[Any], nodes: dict[str, Node]) -> tuple[list[Edge], list[Problem]]:
    edges: list[Edge] = []
    problems: list[Problem] = []
    seen: dict[tuple[str, str, Any], int] = {}
    for index, raw in enumerate(raw_edges):
        where = f"edges[{index}]"
        if not isinstance(raw, dict):
            problems.append(Problem(where, 'An edge is an object: {"from", "to", "when"?}.'))
            continue
        problems += [
            Problem(f"{where}.{key}", "Unknown key (an edge has from, to and when).")
            for key in raw
            if key not in EDGE_KEYS
        ]
        ends_ok = True
        for end in ("from", "to"):
            value = raw.get(end)
            if value not in nodes:
                ends_ok = False
                problems.append(
                    Problem(f"{where}.{end}", f"No node has the id {value!r}: the edge dangles.")
                )
        if not ends_ok:
            continue
        source, target = nodes[raw["from"]], nodes[raw["to"]]
        when = _when(raw.get("when"))
        if when == "bad":
            problems.append(Problem(f"{where}.when", 'Use true or false ("true"/"false").'))
            continue
        is_condition = source.node_type is not None and source.node_type.kind == "condition"
        if when is not None and not is_condition:
            problems.append(
                Problem(
                    f"{where}.when",
                    f"Only edges leaving a condition have when; {source.id} is not a condition.",
                )
            )
            continue
        if target.node_type is not None and target.node_type.kind == "trigger":
            problems.append(
                Problem(f"{where}.to", f"{target.id} is a trigger: nothing may lead into it.")
            )
            continue
        if is_condition and when is None:
            when = True
        key = (source.id, target.id, when)
        if key in seen:
            problems.append(Problem(where, f"The same edge as edges[{seen[key]}]."))
            continue
        seen[key] = index
        edges.append(Edge(index, source.id, target.id, when))  # type: ignore[arg-type]
    return edges, problems


def _cycles(graph: Graph) -> list[Problem]:
    problems: list[Problem] = []
    color: dict[str, int] = dict.fromkeys(graph.nodes, 0)  # 0 new, 1 on the path, 2 done
    path: list[str] = []

    def visit(node_id: str) -> None:
        color[node_id] = 1
        path.append(node_id)
        for edge in graph.outgoing(node_id):
            if color[edge.target] == 1:
                loop = [*path[path.index(edge.target) :], edge.target]
                problems.append(
                    Problem(
                        f"edges[{edge.index}]",
                        f"{edge.source} → {edge.target} closes a cycle: {' → '.join(loop)}.",
                    )
                )
            elif color[edge.target] == 0:
                visit(edge.target)
        path.pop()
        color[node_id] = 2

    for node_id in graph.nodes:
        if color[node_id] == 0:
            visit(node_id)
    return problems


def parse_graph(raw: Any, registry: Registry) -> tuple[Graph, list[Problem]]:
    """Parse a graph's JSON; the problems are those of its shape, types and configs."""
    if not isinstance(raw, Mapping):
        return Graph({}, []), [Problem("graph", 'A graph is an object: {"nodes", "edges"}.')]
    problems = [
        Problem(f"graph.{key}", "Unknown key (a graph has nodes and edges).")
        for key in raw
        if key not in ("nodes", "edges")
    ]
    raw_nodes, raw_edges = raw.get("nodes"), raw.get("edges", [])
    if not isinstance(raw_nodes, list) or not raw_nodes:
        problems.append(Problem("nodes", "Give a list of nodes (at least a trigger)."))
    elif not isinstance(raw_edges, list):
        problems.append(Problem("edges", "Give a list of edges (it may be empty)."))
    elif len(raw_nodes) > MAX_NODES or len(raw_edges) > MAX_EDGES:
        limit = f"at most {MAX_NODES} nodes and {MAX_EDGES} edges"
        problems.append(Problem("graph", f"The graph is too big ({limit})."))
    else:
        return _parse_parts(raw_nodes, raw_edges, registry, problems)
    return Graph({}, []), problems


def _parse_parts(
    raw_nodes: list[Any], raw_edges: list[Any], registry: Registry, problems: list[Problem]
) -> tuple[Graph, list[Problem]]:
    nodes, node_problems = _parse_nodes(raw_nodes, registry)
    edges, edge_problems = _parse_edges(raw_edges, nodes)
    graph = Graph(nodes, edges)
    triggers = [n for n in nodes.values() if n.node_type and n.node_type.kind == "trigger"]
    if triggers:
        graph.trigger = triggers[0]
    return graph, problems + node_problems + edge_problems


def _structure(graph: Graph, registry: Registry) -> list[Problem]:
    problems: list[Problem] = []
    triggers = [n for n in graph.nodes.values() if n.node_type and n.node_type.kind == "trigger"]
    if not triggers:
        kinds = ", ".join(k for k, t in registry.items() if t.kind == "trigger")
        problems.append(Problem("nodes", f"The graph has no trigger node; add one of: {kinds}."))
    for extra in triggers[1:]:
        problems.append(
            Problem(
                f"{extra.where}.type",
                f"A graph has exactly one trigger and {triggers[0].id} is already it.",
            )
        )
    problems += _cycles(graph)
    if graph.trigger is not None:
        reachable = set(graph.reachable_from(graph.trigger.id))
        for node in graph.nodes.values():
            if node.id not in reachable and node not in triggers[1:]:
                problems.append(
                    Problem(
                        node.where,
                        f"Not reachable from the trigger {graph.trigger.id}: connect it with an "
                        "edge or remove it.",
                    )
                )
    return problems


class References(Protocol):
    """What a graph may refer to in its org, and the check of what it does refer to
    (``references.OrgSchema``, which reads a parsed graph: so this module never imports it)."""

    def check(self, graph: Graph) -> list[tuple[str, str]]:
        """``(field, message)`` for each reference ``graph`` makes that cannot resolve."""
        ...


def validate_graph(raw: Any, registry: Registry, org: References) -> list[Problem]:
    """Every problem of a graph, itemized; an empty list means it can be saved and run.

    ``org`` is an ``OrgSchema``: the models and fields the graph may refer to.
    """
    graph, problems = parse_graph(raw, registry)
    if not graph.nodes:
        return problems
    problems += _structure(graph, registry)
    problems += [Problem(f, m) for f, m in org.check(graph)]
    return problems
