"""Running queued jobs in a test: what a consumer would do, in the test's own thread."""

from __future__ import annotations

from flask import current_app

from monark.core import jobs


def drain() -> int:
    """Run every job waiting in the current app's queue (and those they queue); how many."""
    return jobs.drain(current_app._get_current_object())  # type: ignore[attr-defined]
