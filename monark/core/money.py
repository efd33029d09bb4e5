"""Exact amounts of money in the database: ``Numeric`` on PostgreSQL, an integer count of
tenths of a nano-unit on SQLite (whose NUMERIC is a float), so sums stay exact on both."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, Numeric, TypeDecorator
from sqlalchemy.engine import Dialect

SCALE = 10  # decimal places kept: a price per million tokens with 4 places, per token
_UNIT = Decimal(1).scaleb(-SCALE)


def exact(value: Decimal) -> Decimal:
    """``value`` rounded to the places the database keeps."""
    return value.quantize(_UNIT)


class Money(TypeDecorator[Decimal]):
    """A ``Decimal`` with ``SCALE`` places, stored exactly (``SUM`` over it too)."""

    impl = Numeric(20, SCALE)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(Numeric(20, SCALE))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = exact(Decimal(value))
        return int(value.scaleb(SCALE)) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return Decimal(int(value)).scaleb(-SCALE).quantize(_UNIT)
        return exact(Decimal(value))


_CENT = Decimal("0.01")


def plain_text(value: Decimal) -> str:
    """An amount as a person types it: no exponent and no padding zeros (``0.0000001``,
    ``1.1456``; never ``1E-7`` or ``1.1456000000``), exact."""
    return f"{value.normalize():f}"


def money_text(value: Decimal | None) -> str:
    """US dollars as people read them: to the cent, a smaller amount to three figures, and
    "unknown" for None (a model without a price)."""
    if value is None:
        return "unknown"
    if value == 0 or abs(value) >= _CENT:
        return f"${value.quantize(_CENT):,}"
    figures = value.quantize(Decimal(1).scaleb(value.adjusted() - 2)).normalize()
    return f"${figures:f}"
