"""Untrusted Markdown (model replies, wiki pages) to safe HTML: markdown-it-py, then nh3's
allow-list; and JSON shown to people (tool input and results on cards)."""

from __future__ import annotations

import functools
import json
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from monark.core.text import scrub

# Raw HTML in the model's Markdown is shown as text, never parsed.
_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    ["table", "strikethrough"]
)


def _image(self: Any, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
    """A remote image becomes a link to it (the CSP and nh3 would leave a broken box)."""
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    if _same_origin_path(src):
        return self.image(tokens, idx, options, env)
    alt = self.renderInlineAsText(token.children or [], options, env) or "image"
    return f'<a href="{escapeHtml(src)}">Image: {escapeHtml(alt)}</a>'


_md.add_render_rule("image", _image)

ALLOWED_TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "img", "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr",
    "ul",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title"}, "ol": {"start"}}


def _same_origin_path(value: str) -> bool:
    value = value.strip()
    return value.startswith("/") and not value.startswith(("//", "/\\"))


def _filter_attribute(tag: str, attribute: str, value: str) -> str | None:
    # Images only from this origin: a remote image is a request the model could aim anywhere.
    if tag == "img" and attribute == "src" and not _same_origin_path(value):
        return None
    return value


CACHED_TEXT = 20_000  # characters of a reply whose rendering is remembered


def render_markdown(text: str) -> Markup:
    """Safe HTML for a reply: no scripts, handlers, javascript:/data: links or remote images.
    A pure function of the text, so the last few hundred short ones are remembered: a thread
    drawn again renders only what is new."""
    text = text or ""
    return _rendered(text) if len(text) <= CACHED_TEXT else _render(text)


def _render(text: str) -> Markup:
    html = _md.render(scrub(text))  # nh3 (Rust) refuses lone surrogates
    clean = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
        attribute_filter=_filter_attribute,
        strip_comments=True,
    )
    return Markup(clean)


_rendered = functools.lru_cache(maxsize=512)(_render)


def pretty_json(value: Any) -> str:
    """Indented JSON for showing tool input and results (escaped by the template)."""
    # A JSON column hands back lone surrogates as stored: U+FFFD, or the page cannot encode.
    return scrub(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str))
