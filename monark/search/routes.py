"""The ``search`` tool: the header's index, for the in-app assistant only.

Kept off ``/api/v1`` and MCP (as the wiki's routes are): its JSON view is under
``/internal/search``. The reader is the person, so their own conversations are found too,
except the one the assistant is answering in (its question would find itself first).
"""

from __future__ import annotations

from monark.core.rbac import Principal
from monark.core.routes import RouteDescriptor, RouteTable, headline
from monark.search import schemas as s
from monark.search import services
from monark.search.links import url_of

routes = RouteTable("assistant")


@routes.get("/search", "chat.use", preview=headline("search for “{q}”"))
def search(principal: Principal, path: None, query: s.SearchQuery, body: None) -> s.SearchOut:
    """Search the organization's wiki pages (titles and bodies), records, automations and
    the user's own conversations at once, best match first.

    Use it to find what the workspace says about a subject ("what does our wiki say about
    refunds?": search "refunds"), then read a page or record with its own tool."""
    hits = services.search(
        principal, query.q, query.limit, exclude_conversation=principal.conversation_id
    )
    return s.SearchOut(
        query=query.q,
        results=[
            s.SearchHit(
                kind=h.kind,
                id=h.conversation_id if h.kind == "conversation" else h.object_id,
                title=services.unmarked(h.title),
                snippet=h.plain_snippet,
                model=h.model_key,
                url=url_of(h),
            )
            for h in hits
        ],
    )


SEARCH_ROUTES: tuple[RouteDescriptor, ...] = tuple(routes.routes)
bp = routes.blueprint("search_internal", __name__)
