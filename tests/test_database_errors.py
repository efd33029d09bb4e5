"""A database error's text, which reaches logs, leaves out the values its statement carried."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from monark.extensions import db


def test_a_failed_statements_error_does_not_carry_its_values(app):
    secret = "a reply's private words"
    with pytest.raises(DBAPIError) as failed:
        db.session.execute(text("SELECT :said FROM no_such_table"), {"said": secret})
    db.session.rollback()
    assert "no_such_table" in str(failed.value)  # still says what failed
    assert secret not in str(failed.value)
