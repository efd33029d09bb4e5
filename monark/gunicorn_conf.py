"""gunicorn settings for Monark: ``gunicorn -c python:monark.gunicorn_conf app:app``.

gthread workers: each streaming assistant turn holds one thread for its whole length (plus
a short-lived worker thread of its own), so a process needs many threads for pages to stay
fast while turns stream. bench/stream_bench.py measures how many one process holds.
"""

import gc
import os
import re

from gunicorn.glogging import Logger

bind = os.environ.get("MONARK_BIND", "127.0.0.1:8000")
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("MONARK_THREADS", "32"))
# Import the app (and the slow model SDK) once in the master, then fork.
preload_app = True
accesslog = "-"

# An invitation link carries its token in the path (monark.settings.joining.invite_link).
_INVITE_TOKEN = re.compile(r"(/invite/)[^/?#\s\"]+")


class AccessLogger(Logger):
    """gunicorn's logger, with invitation tokens cut out of everything the access log writes."""

    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        for key, value in atoms.items():
            if isinstance(value, str) and "/invite/" in value:
                atoms[key] = _INVITE_TOKEN.sub(r"\1[redacted]", value)
        return atoms


logger_class = AccessLogger


def on_starting(server) -> None:
    """Warm the SDK import, then exempt everything loaded so far from the cyclic GC.

    Full collections over the SDK's many objects stalled every stream for 30-100 ms.
    """
    from monark.chat.llm.anthropic import import_sdk  # the SDK's only importer

    import_sdk()
    gc.freeze()
