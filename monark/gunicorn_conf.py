"""gunicorn settings for Monark: ``gunicorn -c python:monark.gunicorn_conf app:app``.

gthread workers: each streaming assistant turn holds one thread for its whole length (plus
a short-lived worker thread of its own), so a process needs many threads for pages to stay
fast while turns stream. bench/stream_bench.py measures how many one process holds.
"""

import gc
import glob
import os
import tempfile

from gunicorn.glogging import Logger

from monark.core.accesslog import redact, safe_query

bind = os.environ.get("MONARK_BIND", "127.0.0.1:8000")
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("MONARK_THREADS", "32"))
# Import the app (and the slow model SDK) once in the master, then fork.
preload_app = True
accesslog = "-"

# The environ atoms that hold a bare query string (``a=1&b=2``, no ``?`` to find it by).
_QUERY_ATOMS = ("q", "{query_string}e")


class AccessLogger(Logger):
    """gunicorn's logger; the access log writes no query string and no token in a path,
    whatever its format names (``monark.core.accesslog``, the rule ``flask run`` uses too)."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        for key, value in atoms.items():
            if key in _QUERY_ATOMS:
                atoms[key] = safe_query(value)
            elif isinstance(value, str):
                atoms[key] = redact(value)
        return atoms


logger_class = AccessLogger

# /metrics (monark.core.metrics): with it on, prometheus-client keeps each worker's counts in
# files of one folder (its multiprocess mode), so any worker answers for all. Set before the
# app (and so the client) is imported, which preload_app does after reading this file.
METRICS_ON = bool(os.environ.get("METRICS_TOKEN") or os.environ.get("METRICS_BIND"))
if METRICS_ON and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="monark-metrics-")


def _metrics_bind() -> tuple[str, int] | None:
    raw = os.environ.get("METRICS_BIND", "").strip()
    if not raw:
        return None
    host, _, port = raw.rpartition(":")
    if not port.isdigit():
        raise RuntimeError(f"METRICS_BIND must be host:port, not {raw!r}.")
    return host or "127.0.0.1", int(port)


def on_starting(server) -> None:
    """Warm the SDK import, then exempt everything loaded so far from the cyclic GC.

    Full collections over the SDK's many objects stalled every stream for 30-100 ms.
    """
    from monark.chat.llm.anthropic import import_sdk  # the SDK's only importer

    import_sdk()
    gc.freeze()
    if folder := os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Counts of an earlier run of the server are not this one's.
        for stale in glob.glob(os.path.join(folder, "*.db")):
            os.remove(stale)


def when_ready(server) -> None:
    """Serve /metrics on its own bind (``METRICS_BIND``) from the master, if asked."""
    bind = _metrics_bind()
    if bind is None:
        return
    from prometheus_client import start_http_server

    from monark.core.metrics import bind_registry

    start_http_server(bind[1], bind[0], registry=bind_registry(server.app.wsgi()))


def post_fork(server, worker) -> None:
    """A worker starts with no database connection of the master's (the bind's reads)."""
    if _metrics_bind() is not None:
        from monark.extensions import db

        with server.app.wsgi().app_context():
            db.engine.dispose(close=False)


def child_exit(server, worker) -> None:
    """A worker that ended: its live gauges leave /metrics (its counts stay counted)."""
    if METRICS_ON:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
