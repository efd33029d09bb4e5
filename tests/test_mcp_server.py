"""The stdio MCP server: spawned as ``monark-mcp`` and driven by the mcp SDK's own client.

The app runs on a loopback port (``live_server``); each test spawns one server process with
one API key of the ``world`` and talks MCP to it over stdin/stdout, as Claude Desktop would.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from sqlalchemy import func, select

from monark.api.routes import V1_ROUTES
from monark.chat.runtime import tool_executor
from monark.core.keys import revoke_key
from monark.core.models import ApiKey, Event
from monark.core.routes import tool_input_schema
from monark.extensions import db
from monark.records.models import Record
from tests.factories import World

pytestmark = pytest.mark.instances  # each starts app processes of its own

ROOT = Path(__file__).resolve().parents[1]
MONARK_MCP = Path(sys.executable).with_name("monark-mcp")
EXPOSED = {r.name: r for r in V1_ROUTES if r.audience == "public"}

Body = Callable[[ClientSession], Awaitable[Any]]


def text_of(result: types.CallToolResult) -> str:
    """The text content of a tool result, joined."""
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def key_id(token: str) -> int:
    """The id of the key row behind a plaintext token."""
    return db.session.scalar(select(ApiKey.id).where(ApiKey.prefix == token[:10]))


def record_count() -> int:
    return db.session.scalar(select(func.count()).select_from(Record))


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mcp_run(live_server: str, tmp_path: Path) -> Callable[..., Any]:
    """``mcp_run(key, body, url=...)``: spawn monark-mcp with the key, initialize, run ``body``.

    The server's stderr is kept and checked for tracebacks: a failing call must come back as
    a tool result, never crash the server.
    """
    assert MONARK_MCP.exists(), "install the package (make install-dev) to get monark-mcp"
    errlog = tmp_path / "monark-mcp.stderr"

    async def session(env: dict[str, str], body: Body) -> Any:
        params = StdioServerParameters(command=str(MONARK_MCP), env=env, cwd=ROOT)
        with errlog.open("a") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                return await body(client)

    def run(key: str, body: Body, url: str = live_server) -> Any:
        env = {"MONARK_API_KEY": key, "MONARK_URL": url}
        # Its own thread: the browser tests' Playwright keeps an event loop on this one.
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(anyio.run, session, env, body).result()
        assert "Traceback" not in errlog.read_text()
        return result

    return run


def call(name: str, arguments: dict[str, Any]) -> Body:
    """A session body that calls one tool."""

    async def body(client: ClientSession) -> types.CallToolResult:
        return await client.call_tool(name, arguments)

    return body


def test_tools_are_the_exposed_routes_described_as_in_the_app(world: World, mcp_run):
    async def body(client: ClientSession) -> list[types.Tool]:
        return (await client.list_tools()).tools

    tools = {t.name: t for t in mcp_run(world.a.keys["member"], body)}

    assert set(tools) == set(EXPOSED)
    in_app = {s.name: s for s in tool_executor().specs()}
    assert "navigate" in in_app  # in-app only, like automation_* and wiki_* tools
    assert not set(tools) & (set(in_app) - set(EXPOSED))
    for name, tool in tools.items():
        route = EXPOSED[name]
        assert tool.input_schema == tool_input_schema(route) == in_app[name].input_schema
        assert tool.description == in_app[name].description
        assert tool.annotations.read_only_hint is (route.method == "GET")
        assert tool.annotations.open_world_hint is False
    assert tools["records_delete"].annotations.destructive_hint is True
    assert tools["records_create"].annotations.destructive_hint is False
    assert tools["records_create"].annotations.idempotent_hint is False


def test_member_key_lists_and_creates_records(world: World, mcp_run):
    key = world.a.keys["member"]

    async def body(client: ClientSession) -> tuple[types.CallToolResult, types.CallToolResult]:
        listed = await client.call_tool("records_list", {"model": "tasks", "limit": 10})
        created = await client.call_tool(
            "records_create", {"model": "tasks", "values": {"title": "Call Initech"}}
        )
        return listed, created

    listed, created = mcp_run(key, body)

    assert not listed.is_error, text_of(listed)
    titles = [item["title"] for item in listed.structured_content["items"]]
    assert "Acme public task" in titles
    assert not any("Globex" in t for t in titles)
    assert '"Acme public task"' in text_of(listed)
    assert not created.is_error, text_of(created)
    record = db.session.get(Record, created.structured_content["id"])
    assert record.org_id == world.a.org.id
    assert record.values["title"] == "Call Initech"
    event = db.session.scalar(
        select(Event).where(Event.type == "record.created", Event.subject_id == record.id)
    )
    assert (event.actor_kind, event.actor_id) == ("api_key", key_id(key))


def test_viewer_key_cannot_create(world: World, mcp_run):
    before = record_count()

    result = mcp_run(
        world.a.keys["viewer"],
        call("records_create", {"model": "tasks", "values": {"title": "Sneaky"}}),
    )

    assert result.is_error
    assert "403" in text_of(result)
    assert "records.create permission" in text_of(result)
    assert record_count() == before


def test_revoked_key_fails_with_a_clear_error(world: World, mcp_run):
    key = world.a.keys["member"]
    revoke_key(world.a.principal("owner"), key_id(key))

    result = mcp_run(key, call("me_get", {}))

    assert result.is_error
    assert "401" in text_of(result)
    assert "invalid or has been revoked" in text_of(result)


def test_key_of_one_org_cannot_read_another_orgs_record(world: World, mcp_run):
    own, other = world.a.public.id, world.b.public.id

    async def body(client: ClientSession) -> tuple[types.CallToolResult, types.CallToolResult]:
        mine = await client.call_tool("records_get", {"model": "tasks", "record_id": own})
        theirs = await client.call_tool("records_get", {"model": "tasks", "record_id": other})
        return mine, theirs

    mine, theirs = mcp_run(world.a.keys["owner"], body)

    assert not mine.is_error and mine.structured_content["id"] == own
    assert theirs.is_error
    assert "404" in text_of(theirs)
    assert "Globex" not in text_of(theirs)


def test_api_validation_errors_name_each_field(world: World, mcp_run):
    result = mcp_run(
        world.a.keys["member"],
        call("records_create", {"model": "tasks", "values": {"status": "someday"}}),
    )

    assert result.is_error
    text = text_of(result)
    assert "400" in text
    assert "values.title" in text
    assert "values.status" in text


def test_bad_arguments_fail_before_any_http_call(world: World, mcp_run):
    # Nothing listens at this URL, so any HTTP call would fail with "Could not reach Monark".
    nowhere = f"http://127.0.0.1:{closed_port()}"

    async def body(client: ClientSession) -> list[types.CallToolResult]:
        return [
            await client.call_tool("records_create", {"model": "tasks"}),
            await client.call_tool("records_list", {"model": "tasks", "limit": 500}),
            await client.call_tool("records_get", {"model": "tasks", "record_id": 1, "x": 1}),
            await client.call_tool("records_list", {"model": "tasks"}),
            await client.call_tool("me_get", {}),
        ]

    missing, too_big, unknown, unreachable, still_serving = mcp_run(
        world.a.keys["member"], body, url=nowhere
    )

    for result, field in ((missing, "values"), (too_big, "limit"), (unknown, "x")):
        assert result.is_error
        assert text_of(result).startswith("Invalid arguments.")
        assert f"{field}:" in text_of(result)
    for result in (unreachable, still_serving):
        assert result.is_error
        assert "Could not reach Monark" in text_of(result)


@pytest.mark.parametrize(
    ("env", "message"),
    [({}, "MONARK_API_KEY is not set"), ({"MONARK_API_KEY": "sk-123"}, "start with mrk_")],
)
def test_server_refuses_to_start_without_a_usable_key(env: dict[str, str], message: str):
    done = subprocess.run(
        [str(MONARK_MCP)],
        env={"PATH": "/usr/bin:/bin", **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_server_loads_neither_the_assistant_nor_the_web_app():
    code = "import sys, monark.mcp.server; print('\\n'.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()

    for package in ("monark.assistant", "monark.chat", "monark.api.views", "monark.api.dispatch"):
        assert not [m for m in loaded if m == package or m.startswith(package + ".")]
