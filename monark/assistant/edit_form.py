"""A form drawn from a tool's edit schema (JSON Schema), and the arguments read back from it.

Each property becomes a typed control: text, a text area, a number, a date, a select of
its options (labels from ``x-labels``), Yes/No for a boolean, several choices for a list of
options, JSON for anything else; an object with properties becomes a group of its own.
Names are the dotted argument paths (``values.status``), the same names validation errors
use, so an error lands beside its control.

A blank control leaves its argument out, unless the call had that argument: then blank
clears it (``None``), as "null or an empty string clears a field" says for records. A
control left at the default it showed, for an argument the call did not have, is left out
too (the route applies that default anyway): it is no change.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from werkzeug.datastructures import MultiDict

from monark.core.bounds import MAX_DEPTH, check_depth
from monark.core.text import scalar_text

Widget = Literal[
    "text", "textarea", "number", "date", "datetime", "select", "yesno", "multi", "json", "group"
]
PREFIX = "arg."
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
YES_NO = [("", "—"), ("true", "Yes"), ("false", "No")]


@dataclass
class FormField:
    """One control of the edit form (or a group of them, for an object)."""

    path: str  # dotted argument path, also the error's field name
    label: str
    widget: Widget
    required: bool
    value: Any = ""  # what the control shows: a string, or a list for ``multi``
    options: list[tuple[str, str]] = field(default_factory=list)
    max_length: int | None = None
    step: str = "any"
    error: str | None = None
    children: list[FormField] = field(default_factory=list)
    scope: str = ""  # the form's own part of each id: two forms may be open on one page

    @property
    def name(self) -> str:
        return PREFIX + self.path

    @property
    def dom_id(self) -> str:
        scope = f"{self.scope}-" if self.scope else ""
        return f"edit-{scope}" + "".join(c if c.isalnum() else "-" for c in self.path)


def _resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """A property with ``$ref`` looked up and ``anyOf [X, null]`` read as a nullable X."""
    prop = dict(prop)
    ref = prop.pop("$ref", None)
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        prop = {**defs.get(ref.rsplit("/", 1)[1], {}), **prop}
    nullable = False
    choices = prop.get("anyOf")
    if isinstance(choices, list):
        kept = [c for c in choices if not (isinstance(c, Mapping) and c.get("type") == "null")]
        nullable = len(kept) < len(choices)
        if len(kept) == 1:
            inner, _ = _resolve(kept[0], defs)
            prop = {**inner, **{k: v for k, v in prop.items() if k != "anyOf"}}
    return prop, nullable


def _label(name: str, prop: Mapping[str, Any]) -> str:
    return str(prop.get("title") or name.replace("_", " ").capitalize())


def _options(prop: Mapping[str, Any]) -> list[tuple[str, str]]:
    values = list(prop.get("enum") or [])
    labels = list(prop.get("x-labels") or [])
    return [
        (_text(v), str(labels[i]) if i < len(labels) else _text(v)) for i, v in enumerate(values)
    ]


def _text(value: Any) -> str:
    """A value as a control shows it (and reads it back): JSON's words for booleans, an
    object or a list as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None or isinstance(value, str | int | float):
        return scalar_text(value)
    return json.dumps(value, ensure_ascii=False, indent=1)


def _widget(prop: Mapping[str, Any]) -> Widget:
    kind = prop.get("type")
    if kind == "object" and isinstance(prop.get("properties"), Mapping):
        return "group"
    if prop.get("enum") is not None and kind in ("string", "integer", "number", None):
        return "select"
    if kind == "string":
        fmt = prop.get("format")
        if fmt == "date":
            return "date"
        if fmt == "date-time":
            return "datetime"
        return "textarea" if fmt == "textarea" else "text"
    if kind in ("integer", "number"):
        return "number"
    if kind == "boolean":
        return "yesno"
    if kind == "array" and isinstance(prop.get("items"), Mapping) and prop["items"].get("enum"):
        return "multi"
    return "json"


def build_fields(
    schema: Mapping[str, Any],
    arguments: Mapping[str, Any],
    errors: Mapping[str, str] | None = None,
    shown: Mapping[str, Any] | None = None,
    scope: str = "",
) -> list[FormField]:
    """The controls for ``schema``, showing ``arguments`` (or what was typed, ``shown``:
    the raw form after a refused save), with ``errors`` by dotted path; ``scope`` goes
    into every control's id (a call's id: each open form's ids are its own)."""
    fields = _fields(schema, arguments, errors or {}, shown, schema.get("$defs") or {}, "")
    _scoped(fields, scope)
    return fields


def _scoped(fields: list[FormField], scope: str) -> None:
    for item in fields:
        item.scope = scope
        _scoped(item.children, scope)


def _fields(
    schema: Mapping[str, Any],
    arguments: Any,
    errors: Mapping[str, str],
    shown: Mapping[str, Any] | None,
    defs: Mapping[str, Any],
    prefix: str,
) -> list[FormField]:
    arguments = arguments if isinstance(arguments, Mapping) else {}
    required = set(schema.get("required") or [])
    out: list[FormField] = []
    for name, raw in (schema.get("properties") or {}).items():
        prop, _ = _resolve(raw, defs)
        path = prefix + name
        widget = _widget(prop)
        item = FormField(
            path=path,
            label=_label(name, prop),
            widget=widget,
            required=name in required,
            max_length=prop.get("maxLength"),
            step="1" if prop.get("type") == "integer" else "any",
            error=errors.get(path),
        )
        if widget == "group":
            item.children = _fields(prop, arguments.get(name), errors, shown, defs, path + ".")
        else:
            if widget == "select":
                item.options = [("", "—"), *_options(prop)]
            elif widget == "multi":
                item.options = _options(prop["items"])
            elif widget == "yesno":
                item.options = list(YES_NO)
            item.value = _shown(item, arguments.get(name, prop.get("default")), shown)
        out.append(item)
    return out


def _shown(item: FormField, value: Any, shown: Mapping[str, Any] | None) -> Any:
    if shown is not None:
        if item.widget == "multi":
            return list(shown.getlist(item.name)) if isinstance(shown, MultiDict) else []
        return shown.get(item.name, "")
    if item.widget == "multi":
        return [_text(v) for v in value] if isinstance(value, list) else []
    return _text(value)


def read_form(
    schema: Mapping[str, Any], form: MultiDict, arguments: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments the form says, and problems by dotted path (types only: the tool's
    own checks run after)."""
    problems: dict[str, str] = {}
    values = _read(schema, form, arguments, problems, schema.get("$defs") or {}, "")
    return values, problems


def _read(
    schema: Mapping[str, Any],
    form: MultiDict,
    arguments: Any,
    problems: dict[str, str],
    defs: Mapping[str, Any],
    prefix: str,
) -> dict[str, Any]:
    arguments = arguments if isinstance(arguments, Mapping) else {}
    required = set(schema.get("required") or [])
    out: dict[str, Any] = {}
    for name, raw in (schema.get("properties") or {}).items():
        prop, nullable = _resolve(raw, defs)
        path = prefix + name
        widget = _widget(prop)
        if widget == "group":
            out[name] = _read(prop, form, arguments.get(name), problems, defs, path + ".")
            continue
        if widget == "multi":
            picked = form.getlist(PREFIX + path)
            allowed = {v for v, _ in _options(prop["items"])}
            if any(p not in allowed for p in picked):
                problems[path] = "Choose among the options."
            if picked or name in arguments:
                out[name] = [_typed(p, prop["items"]) for p in picked if p in allowed]
            continue
        text = form.get(PREFIX + path, "")
        blank = text == "" or (text.strip() == "" and widget != "textarea")
        if blank:
            if name in required and not nullable:
                problems[path] = f"{_label(name, prop)} is required."
            elif name in arguments:
                out[name] = None  # the call had it: blank clears it
            continue
        if name not in arguments and "default" in prop and text == _text(prop["default"]):
            continue  # left as the form showed it: the route's own default, no change
        try:
            out[name] = _parse(text, prop, widget)
        except ValueError as err:
            problems[path] = f"{_label(name, prop)} {err}."
    return out


def _typed(text: str, prop: Mapping[str, Any]) -> Any:
    """An option's text as the option's own value (``3`` for the integer 3)."""
    for value in prop.get("enum") or []:
        if _text(value) == text:
            return value
    return text


def _parse(text: str, prop: Mapping[str, Any], widget: Widget) -> Any:
    if widget == "select":
        for value in prop.get("enum") or []:
            if _text(value) == text:
                return value
        raise ValueError("must be one of the options")
    if widget == "yesno":
        if text not in ("true", "false"):
            raise ValueError("must be Yes or No")
        return text == "true"
    if widget == "number":
        # What a number control sends: float() alone also reads "1_000" and other
        # scripts' digits, which no number input would send.
        if not _NUMBER.fullmatch(text.strip()):
            raise ValueError("must be a number")
        number = float(text.strip())
        if not math.isfinite(number):
            raise ValueError("must be a finite number")
        if prop.get("type") == "integer":
            if not number.is_integer():
                raise ValueError("must be a whole number")
            return int(number)
        return int(number) if number.is_integer() and "." not in text else number
    if widget == "json":
        try:
            value = json.loads(text)
        except RecursionError:  # nested past what the decoder follows
            raise ValueError(f"must be nested at most {MAX_DEPTH} levels deep") from None
        except ValueError:
            raise ValueError("must be valid JSON") from None
        check_depth(value)  # the rule of every tool's arguments, the model's too
        return value
    if widget in ("text", "date", "datetime"):
        return text.strip()
    return text
