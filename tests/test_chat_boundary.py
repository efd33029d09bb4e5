"""monark.chat defines contracts and never reaches into the host (api, views, features)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

CHAT = Path(__file__).resolve().parent.parent / "monark" / "chat"
MONARK = CHAT.parent
# Each model SDK, and the one module that may import it: its adapter.
SDKS = {
    "anthropic": "monark/chat/llm/anthropic.py",
    "openai": "monark/chat/llm/openai_chat.py",
    "google.genai": "monark/chat/llm/gemini.py",
}
ALLOWED = (
    "monark.chat",
    "monark.core.bounds",
    "monark.core.broker",
    "monark.core.crypto",
    "monark.core.enum_text",
    "monark.core.errors",
    "monark.core.events",
    "monark.core.ids",
    # The loop feeds /metrics' counters (prometheus-client, nothing of the host).
    "monark.core.metrics",
    "monark.core.models",
    "monark.core.money",
    "monark.core.net",
    "monark.core.rbac",
    "monark.core.schemas",
    "monark.core.settings",
    "monark.core.text",
    "monark.core.uow",
    # The user's local now for the page note (their zone, read from core's tables).
    "monark.core.zones",
    "monark.extensions",
)
FORBIDDEN_LOADED = (
    "monark.api",
    "monark.assistant",
    "monark.records",
    "monark.settings",
    "monark.audit",
    "monark.automations",
    "monark.wiki",
    "monark.mcp",
    "monark.core.signin",
    "monark.core.web",
)


def imports(path: Path) -> list[str]:
    """Every absolute module name ``path`` imports (``from google import genai`` names
    ``google.genai`` too), wherever in the file."""
    tree = ast.parse(path.read_text(), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def monark_imports(path: Path) -> list[str]:
    return [n for n in imports(path) if n == "monark" or n.startswith("monark.")]


def test_chat_modules_import_only_contracts_and_core():
    offenders = {}
    for path in sorted(CHAT.rglob("*.py")):
        bad = [n for n in monark_imports(path) if not n.startswith(ALLOWED)]
        if bad:
            offenders[str(path.relative_to(CHAT.parent.parent))] = bad
    assert offenders == {}


def test_importing_chat_loads_no_host_package():
    code = (
        "import sys, pkgutil, importlib, monark.chat as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'monark.chat.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=CHAT.parent.parent,
    ).stdout.split()
    loaded = [m for m in out if m.startswith(FORBIDDEN_LOADED)]
    assert loaded == []
    # Every SDK loads on first use, not on import (each is slow to import).
    assert [m for m in out if m.startswith(tuple(SDKS))] == []


def test_each_sdk_is_imported_by_its_adapter_alone():
    importers: dict[str, set[str]] = {sdk: set() for sdk in SDKS}
    for path in sorted(MONARK.rglob("*.py")):
        for name in imports(path):
            for sdk in SDKS:
                if name == sdk or name.startswith(sdk + "."):
                    importers[sdk].add(str(path.relative_to(MONARK.parent)))
    assert importers == {sdk: {adapter} for sdk, adapter in SDKS.items()}


@pytest.mark.parametrize("provider_id", ["anthropic", "openai", "gemini"])
def test_an_adapter_loads_its_sdk_when_it_first_needs_a_client(provider_id):
    code = (
        "import sys\n"
        "from monark.chat.llm.providers import ProviderConfig, get_provider\n"
        f"config = ProviderConfig({provider_id!r}, 'm', 'k', 'http://127.0.0.1:9/v1',"
        " connect_timeout=10, read_timeout=60, max_retries=2)\n"
        f"adapter = get_provider({provider_id!r}).create(config)\n"
        "print('made', *sorted(sys.modules))\n"
        "adapter.client()\n"
        "print('used', *sorted(sys.modules))\n"
    )
    made, used = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=MONARK.parent
    ).stdout.splitlines()
    sdks = tuple(SDKS)
    assert [m for m in made.split() if m.startswith(sdks)] == []
    # Its own SDK, and no other.
    own = {"anthropic": "anthropic", "openai": "openai", "gemini": "google.genai"}[provider_id]
    assert {s for s in SDKS if s in used.split()} == {own}
