"""gunicorn settings for Monark: ``gunicorn -c python:monark.gunicorn_conf app:app``.

gthread workers: each streaming assistant turn holds one thread for its whole length (plus
a short-lived worker thread of its own), so a process needs many threads for pages to stay
fast while turns stream. bench/stream_bench.py measures how many one process holds.
"""

import gc
import os

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


def on_starting(server) -> None:
    """Warm the SDK import, then exempt everything loaded so far from the cyclic GC.

    Full collections over the SDK's many objects stalled every stream for 30-100 ms.
    """
    from monark.chat.llm.anthropic import import_sdk  # the SDK's only importer

    import_sdk()
    gc.freeze()
