"""gunicorn settings for Monark: ``gunicorn -c python:monark.gunicorn_conf app:app``.

gthread workers: each streaming assistant turn holds one thread for its whole length (plus
a short-lived worker thread of its own), so a process needs many threads for pages to stay
fast while turns stream. bench/stream_bench.py measures how many one process holds.
"""

import gc
import os

bind = os.environ.get("MONARK_BIND", "127.0.0.1:8000")
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("MONARK_THREADS", "32"))
# Import the app (and the slow model SDK) once in the master, then fork.
preload_app = True
accesslog = "-"


def on_starting(server) -> None:
    """Warm the SDK import, then exempt everything loaded so far from the cyclic GC.

    Full collections over the SDK's many objects stalled every stream for 30-100 ms.
    """
    import anthropic  # noqa: F401

    gc.freeze()
