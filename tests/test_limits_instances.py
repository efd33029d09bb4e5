"""Two gunicorn instances sharing a Redis limiter (``RATELIMIT_STORAGE_URI``): a limit of N
calls per minute of one API key admits exactly N across both."""

from __future__ import annotations

import pytest

from tests.limits_check import two_instances_admit

pytestmark = pytest.mark.instances  # starts app processes of its own


def test_two_instances_admit_exactly_n_per_minute_between_them():
    result = two_instances_admit(limit=7, sent=30)
    assert sum(result.admitted) == 7
    assert all(result.admitted)  # both instances let some through: the count is shared
    assert result.refused == 30 - 7
