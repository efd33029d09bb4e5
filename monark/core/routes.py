"""The route-descriptor kit: every action an agent can call is declared once.

A ``RouteDescriptor`` beside its feature's services says the route's method, path, name,
summary, pydantic models (path, query, body, response), the permission it needs, who may
call it as a tool, the card preview and any precheck. From it come:

1. its Flask view (``make_view``): under ``/api/v1`` for public routes, under ``/internal``
   for the assistant's own, each answering the app's JSON error body;
2. for public routes, its OpenAPI entry and MCP tool (``monark.api``, ``monark.mcp``);
3. its tool for the in-app assistant (``monark.assistant.tools``): the input schema is the
   path params, query and body flattened into one object (``tool_input_schema``); a call's
   arguments are split again and validated by the route's own models (``prepare_call``),
   then the view runs in-process as the user. Anything but GET is a write.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal, TypeVar, get_origin, get_type_hints
from urllib.parse import quote

from flask import Blueprint, Response, request
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from monark.core.auth import guard, require_principal
from monark.core.errors import AppError, ValidationFailed
from monark.core.jsonbody import request_json
from monark.core.rbac import Principal

T = TypeVar("T")
HttpMethod = Literal["GET", "POST", "PATCH", "PUT", "DELETE"]
Location = Literal["path", "query", "body"]
# Who may call a route as a tool: external agents (MCP, through /api/v1) and the in-app
# assistant; the in-app assistant only (kept off the public API on purpose); or nobody.
Audience = Literal["public", "assistant", "nobody"]
MOUNTS: dict[Audience, str] = {"public": "/api/v1", "assistant": "/internal", "nobody": "/internal"}

Handler = Callable[[Principal, Any, Any, Any], BaseModel]
# What a write's card says: {"headline", "changes"?: [{"field", "before"?, "after"}], ...}
Preview = Callable[[Principal, dict[str, Any]], dict[str, Any]]
# Problems ({"field", "message"}) that make a call unable to work, found before any card.
Precheck = Callable[[Principal, dict[str, Any]], list[dict[str, Any]]]
# Finds the target named by the path (``NotFound`` for another org's) before the body is read.
Lookup = Callable[[Principal, Any], object]
# What a person may change in a proposed call of a write, as JSON Schema typed for its
# target (a record's own fields, say); without one, the tool's input schema less its path.
EditSchema = Callable[[Principal, dict[str, Any]], dict[str, Any] | None]
# More of a tool's description, written for the caller when a turn starts (the in-app
# assistant's tool only: the API and MCP describe the route once for everyone).
Describe = Callable[[Principal], str]
# A dict the dispatcher may put in an in-process request's WSGI environ (``make_view``
# fills it with the arguments it parsed, as the route's tool takes them); an HTTP client
# cannot set environ keys.
ARGUMENTS_ENVIRON_KEY = "monark.route.arguments"


@dataclass(frozen=True)
class Undo:
    """How a done write is undone (``monark.approvals.undo``), declared beside the route.

    ``before(principal, arguments)`` runs in the write's own unit of work just before it,
    reading what putting the target back needs. ``plan(principal, arguments, result,
    before)`` runs just after, in the same unit, and answers the plain JSON that is stored
    on the call (``ToolCall.undo``), or None when this write cannot be undone::

        {"reverse": {"tool": ..., "arguments": {...}},   # the call that puts it back
         "read": {"tool": ..., "arguments": {...}} | None,  # reads the target at undo time
         "after": [{"path": [...], "label": ..., "value": ...}],  # what ``read`` must find
         "summary": "put status back to 'open'"}          # what the card and model read
    """

    before: Callable[[Principal, dict[str, Any]], Any]
    plan: Callable[[Principal, dict[str, Any], Any, Any], dict[str, Any] | None]


@dataclass(frozen=True)
class AllowScope:
    """What "Allow … for this conversation" of a write covers besides its tool
    (``monark.approvals.allowances``): only calls whose ``argument``, a path param naming the
    target (a record tool's ``model``), has the value the allowed call had.
    ``describe(org_id, value)`` says it for a card and the allowance list ("updates to
    Tasks records"): "Allow <that> for this conversation"."""

    argument: str
    describe: Callable[[int, str], str]


class _Arguments(dict):
    def __missing__(self, key: str) -> None:
        return None


def headline(text: str) -> Preview:
    """A preview that always says ``text`` (it follows "Wants to" on a card), with the call's
    arguments named in braces filled in: ``headline("read wiki page #{page_id}")``."""
    return lambda principal, arguments: {"headline": text.format_map(_Arguments(arguments))}


def found_or_none(lookup: Callable[..., T], *args: Any) -> T | None:
    """``lookup(*args)``, or ``None`` where it refuses (no such row, not the user's): a
    preview then says less instead of failing."""
    try:
        return lookup(*args)
    except AppError:
        return None


def without_titles(properties: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-schema properties without pydantic's generated ``title`` (noise for agents)."""
    return {
        name: {k: v for k, v in prop.items() if k != "title"} for name, prop in properties.items()
    }


@dataclass(frozen=True)
class RouteDescriptor:
    """One action: HTTP shape, schemas, permission, audience, preview and precheck."""

    method: HttpMethod
    path: str  # under the mount of its audience, with {param} parts
    name: str  # the endpoint's name, and the tool's
    summary: str
    permission: str
    handler: Handler
    response_model: type[BaseModel]
    path_model: type[BaseModel] | None = None
    query_model: type[BaseModel] | None = None
    body_model: type[BaseModel] | None = None
    audience: Audience = "public"
    description: str = ""
    status: int = 200
    preview: Preview | None = None
    precheck: Precheck | None = None
    lookup: Lookup | None = None
    describe: Describe | None = None
    # The assistant's tool hooks (``monark.chat.executor.ToolSpec``): arguments refused before
    # anything runs, the result shrunk for the model, how much of it the model reads.
    validate: Callable[[dict[str, Any]], str | None] | None = None
    summarize: Callable[[Any], Any] | None = None
    result_limit: int | None = None
    edit_schema: EditSchema | None = None
    # "Allow <tool> for this conversation" (``monark.approvals.allowances``): None means yes for
    # creates and updates (POST, PATCH, PUT), never for a DELETE; False keeps a write
    # asking every time (automations' enable, test runs, graphs that may send webhooks).
    allow: bool | None = None
    # The one target an allowance of this write covers (``AllowScope``); None: the tool
    # as a whole.
    allow_scope: AllowScope | None = None
    # What undoing a done write needs, captured with the write (``Undo``).
    undo: Undo | None = None

    def __post_init__(self) -> None:
        # An edit never changes a path argument, so the target an allowance names stays
        # the one its card showed.
        if self.allow_scope and self.allow_scope.argument not in self.path_params():
            raise ValueError(f"{self.name}: allow_scope must name a path param")

    @property
    def mutates(self) -> bool:
        """Anything but GET changes data (this drives the assistant's confirm gate)."""
        return self.method != "GET"

    @property
    def allowable(self) -> bool:
        """Whether a user may allow this write for a conversation (never a DELETE)."""
        if self.method not in ("POST", "PATCH", "PUT"):
            return False
        return self.allow is not False

    @property
    def mount(self) -> str:
        """Where the route's view lives: ``/api/v1`` or ``/internal``."""
        return MOUNTS[self.audience]

    @property
    def flask_rule(self) -> str:
        """The path with ``{param}`` written as Flask's ``<param>`` (the path model parses it,
        so a bad id is a 400 naming the field)."""
        return re.sub(r"\{(\w+)\}", r"<\1>", self.path)

    def path_params(self) -> list[str]:
        """Names of the ``{param}`` parts of the path, in order."""
        return re.findall(r"\{(\w+)\}", self.path)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a handler's parameter is annotated with (None: the route has
    no such part)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


class RouteTable:
    """The routes of one feature and audience, declared on their handlers:

        routes = RouteTable("assistant")

        @routes.get("/wiki/pages/{page_id}", "wiki.view", preview=previews.get)
        def wiki_get_page(principal, path: PagePath, query: None, body: None) -> PageDetail:
            \"\"\"Get one wiki page with its Markdown body and its path in the tree.\"\"\"

    The name is the handler's, the summary its docstring's first paragraph (the rest is the
    description), the path, query, body and response models its annotations.
    """

    def __init__(self, audience: Audience):
        self.audience = audience
        self.routes: list[RouteDescriptor] = []

    def route(
        self, method: HttpMethod, path: str, permission: str, **options: Any
    ) -> Callable[[Handler], Handler]:
        """Declare the decorated handler as ``method path``; ``options`` are the
        descriptor's (status, preview, precheck, lookup, describe, validate, summarize,
        result_limit, edit_schema, allow, allow_scope, undo)."""

        def declare(handler: Handler) -> Handler:
            hints = get_type_hints(handler)
            summary, _, description = inspect.cleandoc(handler.__doc__ or "").partition("\n\n")
            self.routes.append(
                RouteDescriptor(
                    method=method,
                    path=path,
                    name=handler.__name__,
                    summary=" ".join(summary.split()),
                    description=" ".join(description.split()),
                    permission=permission,
                    handler=handler,
                    response_model=hints["return"],
                    path_model=_model_of(hints.get("path")),
                    query_model=_model_of(hints.get("query")),
                    body_model=_model_of(hints.get("body")),
                    audience=self.audience,
                    **options,
                )
            )
            return handler

        return declare

    def get(self, path: str, permission: str, **options: Any) -> Callable[[Handler], Handler]:
        return self.route("GET", path, permission, **options)

    def post(self, path: str, permission: str, **options: Any) -> Callable[[Handler], Handler]:
        return self.route("POST", path, permission, **options)

    def patch(self, path: str, permission: str, **options: Any) -> Callable[[Handler], Handler]:
        return self.route("PATCH", path, permission, **options)

    def delete(self, path: str, permission: str, **options: Any) -> Callable[[Handler], Handler]:
        return self.route("DELETE", path, permission, **options)

    def blueprint(self, name: str, import_name: str) -> Blueprint:
        """The views of these routes, in one blueprint."""
        return routes_blueprint(name, import_name, self.routes)


# ---- parsing, with errors that name each field ---------------------------------------------


def parse_part(model: type[BaseModel] | None, data: Any, where: Location) -> BaseModel | None:
    """Validate one part of a request with the route's own model."""
    if model is None:
        return None
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as err:
        message = f"The request {where} is invalid."
        raise ValidationFailed.from_pydantic(err, message, where) from None


def describe_error(message: str, details: list[dict[str, Any]]) -> str:
    """An error as one line an agent can act on: the message, then each field's problem."""
    listing = "; ".join(f"{d.get('field', '?')}: {d.get('message', '')}" for d in details)
    return f"{message} {listing}".strip() if listing else message


# ---- the tool face -------------------------------------------------------------------------


def tool_input_schema(route: RouteDescriptor) -> dict[str, Any]:
    """One JSON Schema object: the path params, query and body properties together."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    defs: dict[str, Any] = {}
    for part in (route.path_model, route.query_model, route.body_model):
        schema = part.model_json_schema() if part is not None else {}
        for name, prop in without_titles(schema.get("properties", {})).items():
            if name in properties:
                raise ValueError(f"{route.name}: argument '{name}' appears twice")
            properties[name] = prop
        required += [n for n in schema.get("required", []) if n not in required]
        defs.update(schema.get("$defs", {}))
    out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if defs:
        out["$defs"] = defs
    return out


def editable_schema(schema: Mapping[str, Any], locked: Sequence[str]) -> dict[str, Any] | None:
    """A tool's input schema less its ``locked`` arguments (None when nothing is left)."""
    properties = {k: v for k, v in schema.get("properties", {}).items() if k not in locked}
    if not properties:
        return None
    out = {**schema, "properties": properties}
    out["required"] = [n for n in schema.get("required", []) if n in properties]
    return out


def tool_description(route: RouteDescriptor) -> str:
    """The tool's description: the route's summary, then its longer description."""
    return route.summary + (f"\n\n{route.description}" if route.description else "")


def split_arguments(
    route: RouteDescriptor, arguments: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A tool's flat arguments back into path params, query and body; unknown names are errors."""
    parts: list[tuple[set[str], dict[str, Any]]] = [
        (set(m.model_fields) if m is not None else set(), {})
        for m in (route.path_model, route.query_model, route.body_model)
    ]
    unknown: list[str] = []
    for name, value in arguments.items():
        target = next((values for names, values in parts if name in names), None)
        if target is None:
            unknown.append(name)
        else:
            target[name] = value
    if unknown:
        known = ", ".join(sorted(set().union(*(names for names, _ in parts)))) or "none"
        raise ValidationFailed(
            "Unknown arguments.",
            [{"field": n, "message": f"Unknown argument (known: {known})."} for n in unknown],
        )
    path, query, body = (values for _, values in parts)
    return path, query, body


@dataclass(frozen=True)
class RouteCall:
    """A tool call turned into a request of its route, its arguments already validated."""

    route: RouteDescriptor
    path: str  # the route's path with its params filled in (URL-quoted), without its mount
    query: dict[str, Any] | None
    body: dict[str, Any] | None

    @property
    def url(self) -> str:
        """The path to request in-process: the mount and the filled-in path."""
        return self.route.mount + self.path


def flat_arguments(
    path: BaseModel | None, query: BaseModel | None, body: BaseModel | None
) -> dict[str, Any]:
    """A request's parsed parts as the one flat object of arguments its route's tool takes."""
    arguments: dict[str, Any] = {}
    if path is not None:
        arguments |= path.model_dump(mode="json")
    if query is not None:
        arguments |= query.model_dump(mode="json", exclude_none=True)
    if body is not None:
        arguments |= body.model_dump(mode="json", exclude_unset=True)
    return arguments


def prepare_call(route: RouteDescriptor, arguments: Mapping[str, Any]) -> RouteCall:
    """Split and validate a tool's arguments with the route's own models (``ValidationFailed``)."""
    path_raw, query_raw, body_raw = split_arguments(route, arguments)
    path = parse_part(route.path_model, path_raw, "path")
    query = parse_part(route.query_model, query_raw, "query")
    body = parse_part(route.body_model, body_raw, "body")
    params = path.model_dump() if path is not None else {}
    return RouteCall(
        route=route,
        path=route.path.format(**{k: quote(str(v), safe="") for k, v in params.items()}),
        query=query.model_dump(mode="json", exclude_none=True) if query else None,
        body=body.model_dump(mode="json", exclude_unset=True) if body else None,
    )


# ---- the view face -------------------------------------------------------------------------


def _locate(route: RouteDescriptor, err: ValidationFailed) -> None:
    """Say where each service-reported field came from (``values.x`` is in the body)."""
    parts = (("path", route.path_model), ("query", route.query_model), ("body", route.body_model))
    for detail in err.details:
        if "in" in detail:
            continue
        head = str(detail.get("field", "")).split(".", 1)[0]
        where = next((w for w, m in parts if m is not None and head in m.model_fields), None)
        if where:
            detail["in"] = where


def answer_json(result: BaseModel) -> str:
    """The answer's JSON, written by pydantic (several times faster than dumping a dict);
    stored text with a lone surrogate, which UTF-8 cannot hold, goes out escaped instead."""
    try:
        return result.model_dump_json()
    except PydanticSerializationError:
        return json.dumps(result.model_dump(mode="json"))


@cache
def _repeatable(model: type[BaseModel]) -> frozenset[str]:
    """The query fields that take a list (``?filter=a&filter=b``)."""
    return frozenset(
        name for name, info in model.model_fields.items() if get_origin(info.annotation) is list
    )


def query_arguments(model: type[BaseModel] | None) -> dict[str, Any]:
    """The request's query string as a dict, lists for the fields that repeat."""
    lists = _repeatable(model) if model is not None else frozenset()
    if not lists:
        return request.args.to_dict()
    return {k: request.args.getlist(k) if k in lists else request.args[k] for k in request.args}


def make_view(route: RouteDescriptor) -> Callable[..., Any]:
    """The Flask view of a descriptor: auth, permission, parse, look up, handle, answer JSON."""

    @guard(route.permission)
    def view(**path_args: Any):
        principal = require_principal()
        path = parse_part(route.path_model, path_args, "path")
        if route.lookup is not None:
            route.lookup(principal, path)  # another org's id is 404 before the body is read
        query = parse_part(route.query_model, query_arguments(route.query_model), "query")
        body = parse_part(route.body_model, request_json(), "body") if route.body_model else None
        if (parsed := request.environ.get(ARGUMENTS_ENVIRON_KEY)) is not None:
            parsed.update(flat_arguments(path, query, body))
        try:
            result = route.handler(principal, path, query, body)
        except ValidationFailed as err:
            _locate(route, err)
            raise
        return Response(answer_json(result), route.status, mimetype="application/json")

    view.__name__ = route.name
    view.__doc__ = route.summary
    return view


def routes_blueprint(name: str, import_name: str, routes: Sequence[RouteDescriptor]) -> Blueprint:
    """A blueprint holding the views of ``routes`` (all of one mount)."""
    mounts = {route.mount for route in routes}
    if len(mounts) != 1:
        raise ValueError(f"{name}: routes of one blueprint share a mount, got {sorted(mounts)}")
    bp = Blueprint(name, import_name, url_prefix=mounts.pop())
    for route in routes:
        bp.add_url_rule(route.flask_rule, route.name, make_view(route), methods=[route.method])
    return bp
