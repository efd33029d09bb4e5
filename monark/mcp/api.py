"""Calls of /api/v1 over HTTP with the server's API key, answered as MCP tool results."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
import mcp.types as types

from monark.core.routes import RouteCall, describe_error

log = logging.getLogger("monark.mcp")


def tool_error(text: str) -> types.CallToolResult:
    """A failed call as a tool error the agent reads (the protocol call itself succeeds)."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def tool_result(data: Any) -> types.CallToolResult:
    """A successful call: the JSON as text, and as structured content when it is an object."""
    text = json.dumps(data, ensure_ascii=False)
    structured = data if isinstance(data, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=structured
    )


def waiting_result(data: dict[str, Any]) -> types.CallToolResult:
    """A write held for approval (HTTP 202): not an error, and not done either. The text
    says so first, so an agent reading only text does not take it for the result."""
    text = (
        f"Waiting for approval in Monark: nothing has changed yet. {data.get('message', '')} "
        f"Check it with the approvals_get tool (approval_id {data.get('id')})."
    )
    return types.CallToolResult(
        content=[types.TextContent(text=" ".join(text.split()))], structured_content=data
    )


def api_error(response: httpx2.Response) -> types.CallToolResult:
    """An error answer of the API as a tool error: its message, then each field's problem."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    status = response.status_code
    if not isinstance(error, dict):
        return tool_error(
            f"Monark answered HTTP {status} without an API error body. "
            "Check that MONARK_URL is the app's base URL (for example http://127.0.0.1:5000)."
        )
    message = str(error.get("message") or f"HTTP {status}")
    details = [d for d in error.get("details") or [] if isinstance(d, dict)]
    code = error.get("code") or "error"
    return tool_error(f"HTTP {status} {code}: {describe_error(message, details)}")


class MonarkApi:
    """The /api/v1 client: one key, one base URL, one connection pool."""

    def __init__(self, http: httpx2.AsyncClient):
        self.http = http

    async def send(self, call: RouteCall) -> types.CallToolResult:
        """Run one validated call; every failure comes back as a tool error, never raised."""
        route = call.route
        try:
            response = await self.http.request(
                route.method, call.url, params=call.query, json=call.body
            )
        except httpx2.TimeoutException:
            return tool_error(f"Monark at {self.http.base_url} did not answer in time.")
        except httpx2.HTTPError as err:
            return tool_error(
                f"Could not reach Monark at {self.http.base_url} ({err}). "
                "Is the app running, and is MONARK_URL right?"
            )
        if response.is_error:
            log.info("%s %s: HTTP %s", route.method, call.path, response.status_code)
            return api_error(response)
        try:
            data = response.json()
        except ValueError:
            return tool_error(f"Monark answered HTTP {response.status_code} with a body not JSON.")
        held = isinstance(data, dict) and data.get("status") == "pending"
        if response.status_code == 202 and held:
            return waiting_result(data)
        return tool_result(data)
