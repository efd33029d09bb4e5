"""The app, for fault tests and benches: while the file that ``MONARK_TEST_STALL_FILE`` names
exists, a tool call that stores its result (in the write's own transaction, the write done
but not committed) stalls there, as on a database that stopped answering, until the
process is killed. Served by gunicorn as ``tests.stalling_app:app``."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from sqlalchemy import event

from app import app
from monark.extensions import db

STALL_FILE = os.environ.get("MONARK_TEST_STALL_FILE", "")
STALLED = "stalled storing a tool call's result"


def _stall(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
    storing = statement.lstrip().startswith("UPDATE chat_tool_calls") and "duration_ms" in statement
    if storing and STALL_FILE and os.path.exists(STALL_FILE):
        print(STALLED, file=sys.stderr, flush=True)
        threading.Event().wait()  # until kill -9


with app.app_context():
    event.listen(db.engine, "before_cursor_execute", _stall)
