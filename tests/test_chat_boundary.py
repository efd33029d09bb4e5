"""monark.chat defines contracts and never reaches into the host (api, views, features)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

CHAT = Path(__file__).resolve().parent.parent / "monark" / "chat"
ALLOWED = (
    "monark.chat",
    "monark.core.bounds",
    "monark.core.broker",
    "monark.core.crypto",
    "monark.core.errors",
    "monark.core.events",
    "monark.core.ids",
    "monark.core.models",
    "monark.core.net",
    "monark.core.rbac",
    "monark.core.schemas",
    "monark.core.text",
    "monark.core.uow",
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
    "monark.core.views",
    "monark.core.web",
)


def monark_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [n for n in names if n == "monark" or n.startswith("monark.")]


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
    assert "anthropic" not in out  # the SDK loads on first use, not on import
