"""What a model's tokens cost: the shipped price table (``prices.toml``, dated), a
deployment's own file over it (``PRICES_FILE``), and the cost of one reply's usage.

Prices are per million tokens, exact decimals. A model the table does not name has no price:
its tokens are counted and its cost stays unknown (None), never guessed.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

from monark.chat.llm.types import UsageReport
from monark.core.money import exact

SHIPPED = Path(__file__).with_name("prices.toml")
FIELDS = ("input", "output", "cache_write", "cache_read")
# More than this per million tokens is a typo (a price per token, or per thousand, typed
# as one per million), refused rather than billed.
MAX_PRICE = Decimal(10000)
_MILLION = Decimal(1_000_000)
# Decimal places a price may have: a token's cost then fits the stored scale exactly.
PLACES = 4


class PriceError(ValueError):
    """A price that cannot be one; the message names the field."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens: input, output, cache write, cache read."""

    input: Decimal
    output: Decimal
    cache_write: Decimal
    cache_read: Decimal

    def as_dict(self) -> dict[str, str]:
        """The four prices as strings (for JSON columns and forms)."""
        return {name: str(getattr(self, name)) for name in FIELDS}


def parse_amount(value: Any, field: str) -> Decimal:
    """One price, checked: a number from 0 to ``MAX_PRICE``; ``field`` names it in errors."""
    if isinstance(value, bool) or value is None or str(value).strip() == "":
        raise PriceError(f"{field}: a price is needed (US dollars per million tokens).")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise PriceError(f"{field}: '{value}' is not a number.") from None
    if not amount.is_finite():
        raise PriceError(f"{field}: must be a number.")
    if amount < 0:
        raise PriceError(f"{field}: a price cannot be negative.")
    if amount > MAX_PRICE:
        raise PriceError(f"{field}: more than {MAX_PRICE} per million tokens is not a price.")
    if amount.as_tuple().exponent < -PLACES:  # type: ignore[operator]
        raise PriceError(f"{field}: at most {PLACES} decimal places.")
    return amount


def parse_price(values: dict[str, Any], where: str) -> Price:
    """A ``Price`` from its four fields (each named ``where.field`` in errors)."""
    if not isinstance(values, dict):
        raise PriceError(f"{where}: expected a table of {', '.join(FIELDS)}.")
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise PriceError(f"{where}.{unknown[0]}: not a price field ({', '.join(FIELDS)}).")
    amounts = {name: parse_amount(values.get(name), f"{where}.{name}") for name in FIELDS}
    return Price(**amounts)


@dataclass(frozen=True)
class PriceTable:
    """Prices by (provider, model), and the day they were read."""

    prices: dict[tuple[str, str], Price]
    read: str

    def get(self, provider: str | None, model: str | None) -> Price | None:
        """The price of exactly this provider's model, or None (unknown: never a guess)."""
        return self.prices.get((provider or "", model or ""))


def _read(path: Path) -> PriceTable:
    """A price file parsed and checked (``PriceError`` names the file and the field)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PriceError(f"{path}: cannot be read as TOML ({err}).") from None
    read = str(data.pop("read", "") or "")
    prices: dict[tuple[str, str], Price] = {}
    for provider, models in data.items():
        if not isinstance(models, dict):
            raise PriceError(f"{path}: {provider}: expected a table of models.")
        for model, values in models.items():
            prices[(provider, model)] = parse_price(values, f"{path.name}: {provider}.{model}")
    return PriceTable(prices, read)


@lru_cache(maxsize=8)
def price_table(override: str = "") -> PriceTable:
    """The shipped table, with a deployment's file (``PRICES_FILE``) over it."""
    shipped = _read(SHIPPED)
    if not override:
        return shipped
    own = _read(Path(override))
    return PriceTable({**shipped.prices, **own.prices}, own.read or shipped.read)


def has_usage(usage: UsageReport) -> bool:
    """Whether the provider reported any tokens (one that reports none: cost unknown)."""
    u = usage
    return any((u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_creation_tokens))


def cost_of(price: Price | None, usage: UsageReport) -> Decimal | None:
    """What ``usage`` cost at ``price``, exactly; None when either is unknown."""
    if price is None or not has_usage(usage):
        return None
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_tokens * price.cache_write
        + usage.cache_read_tokens * price.cache_read
    )
    return exact(total / _MILLION)
