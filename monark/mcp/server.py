"""``monark-mcp``: a stdio MCP server whose tools are the /api/v1 routes exposed to agents.

It acts as the holder of one API key (``MONARK_API_KEY``) and calls the app over HTTP at
``MONARK_URL``, so the API's own authentication, permissions, record access, validation
and audit apply to every call. It builds no Flask app and opens no database.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import httpx2
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from monark.api.routes import V1_ROUTES
from monark.core.errors import ValidationFailed
from monark.core.keys import KEY_PREFIX
from monark.core.routes import RouteDescriptor, describe_error, prepare_call
from monark.mcp.api import MonarkApi, tool_error
from monark.mcp.tools import exposed_routes, route_tool

DEFAULT_URL = "http://127.0.0.1:5000"
TIMEOUT_SECONDS = 30.0
INSTRUCTIONS = (
    "Monark's public API, acting as one API key of one organization. Call models_list and "
    "models_get to learn the models and their fields before listing, creating or changing "
    "records. Errors name each bad field. With a key whose writes need approval, a write "
    "answers 'Waiting for approval in Monark' with an approval id instead of its result: "
    "nothing has changed yet; call approvals_get later to learn whether a member approved "
    "it (and its result) or rejected it (and why), and do not send it again meanwhile."
)
log = logging.getLogger("monark.mcp")


class ConfigError(Exception):
    """The environment does not configure the server; the message says how to fix it."""


@dataclass(frozen=True)
class Config:
    """What the server needs: the key it acts as and the app's base URL."""

    api_key: str
    url: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Config:
        """Read ``MONARK_API_KEY`` and ``MONARK_URL``; raise ``ConfigError`` when unusable."""
        key = env.get("MONARK_API_KEY", "").strip()
        if not key:
            raise ConfigError(
                "MONARK_API_KEY is not set. Create a key in Monark (Settings > API keys, as an "
                "admin) and put it in the MCP client's config: "
                '"env": {"MONARK_API_KEY": "mrk_..."}.'
            )
        if not key.startswith(KEY_PREFIX):
            raise ConfigError(
                f"MONARK_API_KEY does not look like a Monark API key (they start with "
                f"{KEY_PREFIX}). Copy the whole key shown when it was created."
            )
        url = (env.get("MONARK_URL") or DEFAULT_URL).strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"MONARK_URL must start with http:// or https:// (got {url!r}).")
        return cls(api_key=key, url=url)


def server_version() -> str:
    """The installed package's version, for the MCP handshake."""
    try:
        return version("monark")
    except PackageNotFoundError:
        return "0+unknown"


def build_server(api: MonarkApi, routes: tuple[RouteDescriptor, ...] = V1_ROUTES) -> Server:
    """The MCP server: list the exposed routes as tools; call one over HTTP."""
    by_name = exposed_routes(routes)
    tools = [route_tool(r) for r in by_name.values()]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        route = by_name.get(params.name)
        if route is None:  # a protocol error, as MCP asks for unknown tools
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        try:
            call = prepare_call(route, params.arguments or {})
        except ValidationFailed as err:
            return tool_error(describe_error("Invalid arguments.", err.details))
        try:
            return await api.send(call)
        except Exception as err:  # the tool boundary: a failure is a result, never a crash
            log.exception("%s failed", params.name)
            return tool_error(f"The call failed inside monark-mcp: {err!r}")

    return Server(
        "monark",
        version=server_version(),
        title="Monark",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(config: Config) -> None:
    """Serve MCP over stdin/stdout until the client closes the connection."""
    async with httpx2.AsyncClient(
        base_url=config.url,
        headers={
            "Authorization": f"Bearer {config.api_key}",
            "Accept": "application/json",
            "User-Agent": f"monark-mcp/{server_version()}",
        },
        timeout=TIMEOUT_SECONDS,
    ) as http:
        server = build_server(MonarkApi(http))
        log.info("serving %d tools for %s", len(exposed_routes(V1_ROUTES)), config.url)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def main() -> None:
    """Entry point of ``monark-mcp``: check the config, then serve over stdio."""
    # stdout is the protocol's wire: logs go to stderr, which MCP clients keep in their logs.
    logging.basicConfig(stream=sys.stderr, format="monark-mcp: %(message)s")
    log.setLevel(logging.INFO)
    try:
        config = Config.from_env(os.environ)
    except ConfigError as err:
        print(f"monark-mcp: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    anyio.run(serve, config)
