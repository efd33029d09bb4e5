"""Cron expressions of schedule triggers: checked, read in words, and their slots.

A schedule is five fields (minute hour day-of-month month day-of-week) or one of the
``@hourly``-style shorthands, read by ``croniter`` in the org's time zone (``org_zone``).
It must fire at all (``0 0 30 2 *`` never does) and at most once a minute (a sixth,
seconds field is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cron_descriptor import (
    ExpressionDescriptor,
    FormatException,
    MissingFieldException,
    Options,
    WrongArgumentException,
)
from croniter import CroniterBadDateError, CroniterError, croniter

from monark.core import zones

MAX_LENGTH = 100
SHORTHANDS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
DAY_NAMES = ("Sundays", "Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays")
DAY_KEYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# How far ahead a schedule must fire once: 29 February comes at least every 8 years.
HORIZON_YEARS = 9


class BadCron(ValueError):
    """A cron expression refused, with the reason (what ``nodes[].config.cron`` says)."""


def org_zone(org_id: int) -> ZoneInfo:
    """The time zone an org's schedules are read in: the org's default (Settings), never
    the owner's own, so a schedule does not move when its owner does."""
    return zones.org_zone(org_id)


def check(expression: str) -> str:
    """``expression`` tidied (single spaces), or ``BadCron`` saying why it cannot be used."""
    text = " ".join(str(expression).split())
    if not text:
        raise BadCron("Give a cron expression: minute hour day month weekday, e.g. 0 9 * * 1-5.")
    if len(text) > MAX_LENGTH:
        raise BadCron(f"Keep the cron expression under {MAX_LENGTH} characters.")
    fields = text.split(" ")
    if text.startswith("@"):
        if text.lower() not in SHORTHANDS:
            raise BadCron(f"Unknown shorthand {text!r}: use one of {', '.join(SHORTHANDS)}.")
    elif len(fields) > 5:
        raise BadCron(
            f"This has {len(fields)} fields: the sixth is seconds, and a schedule may run at "
            "most once a minute. Give five: minute hour day month weekday."
        )
    elif len(fields) < 5:
        raise BadCron(
            f"This has {len(fields)} field{'s' if len(fields) != 1 else ''}: give five, "
            "minute hour day month weekday (e.g. 0 9 * * 1-5)."
        )
    try:
        croniter(text)
    except (CroniterError, ValueError, KeyError) as err:
        raise BadCron(f"Not a cron expression croniter can read: {_reason(err)}") from None
    if next_slot(text, datetime(2000, 1, 1, tzinfo=UTC), ZoneInfo("UTC")) is None:
        raise BadCron(
            "This schedule never fires: no date matches it (such as 30 February or 31 April)."
        )
    return text


def _reason(err: Exception) -> str:
    said = str(err).strip().rstrip(".") or type(err).__name__
    return said[:1].upper() + said[1:] + "."


def next_slot(expression: str, after: datetime, zone: ZoneInfo) -> datetime | None:
    """The first slot strictly after ``after`` (UTC), or None when none comes for years."""
    start = after.astimezone(zone)
    try:
        found = croniter(expression, start, max_years_between_matches=HORIZON_YEARS).get_next(
            datetime
        )
    except CroniterBadDateError:
        return None
    return found.astimezone(UTC)


def previous_slot(expression: str, before: datetime, zone: ZoneInfo) -> datetime | None:
    """The last slot strictly before ``before`` (UTC), or None when none came for years."""
    try:
        found = croniter(
            expression, before.astimezone(zone), max_years_between_matches=HORIZON_YEARS
        ).get_prev(datetime)
    except CroniterBadDateError:
        return None
    return found.astimezone(UTC)


def latest_slot(expression: str, now: datetime, zone: ZoneInfo) -> datetime | None:
    """The last slot at or before ``now`` (UTC)."""
    return previous_slot(expression, now + timedelta(microseconds=1), zone)


def period_at(expression: str, slot: datetime, zone: ZoneInfo) -> timedelta:
    """How long after ``slot`` the next one comes (a slot is on time within it)."""
    following = next_slot(expression, slot, zone)
    return (following - slot) if following is not None else timedelta(days=366 * HORIZON_YEARS)


# ---- in words -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fields:
    minute: str
    hour: str
    day: str
    month: str
    weekday: str


def _clock(hour: str, minute: str) -> str:
    return f"{int(hour):02d}:{int(minute):02d}"


def _weekdays(field: str) -> str | None:
    """``1-5`` → weekdays, ``0,6`` → weekends, ``1,4`` → Mondays and Thursdays."""
    spelled = field.lower()
    for number, key in enumerate(DAY_KEYS):
        spelled = spelled.replace(key, str(number))
    spelled = spelled.replace("7", "0")
    if spelled in ("1-5",):
        return "weekdays"
    if spelled in ("0,6", "6,0"):
        return "weekends"
    parts = spelled.split(",")
    if all(p.isdigit() and int(p) < 7 for p in parts):
        names = [DAY_NAMES[int(p)] for p in parts]
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return None


def _common(f: _Fields) -> str | None:
    """Words for the shapes people write most; None for any other."""
    if f.month != "*":
        return None
    if f.minute == "*" and f.hour == "*" and f.day == "*" and f.weekday == "*":
        return "every minute"
    if f.minute.startswith("*/") and f.minute[2:].isdigit() and f.hour == f.day == f.weekday == "*":
        return f"every {int(f.minute[2:])} minutes"
    if not f.minute.isdigit():
        return None
    if f.hour == "*" and f.day == "*" and f.weekday == "*":
        return "every hour" + (f" at {int(f.minute)} minutes past" if int(f.minute) else "")
    if not f.hour.isdigit():
        return None
    at = _clock(f.hour, f.minute)
    if f.day == "*" and f.weekday == "*":
        return f"every day at {at}"
    if f.day == "*" and (days := _weekdays(f.weekday)):
        return f"{days} at {at}"
    if f.day.isdigit() and f.weekday == "*":
        return f"on day {int(f.day)} of every month at {at}"
    return None


def describe(expression: str, zone: ZoneInfo) -> str:
    """The schedule in words with its zone ("weekdays at 09:00 (UTC)")."""
    text = " ".join(str(expression).split())
    shorthand = {
        "@hourly": "0 * * * *",
        "@daily": "0 0 * * *",
        "@midnight": "0 0 * * *",
        "@weekly": "0 0 * * 0",
        "@monthly": "0 0 1 * *",
        "@yearly": "0 0 1 1 *",
        "@annually": "0 0 1 1 *",
    }.get(text.lower(), text)
    fields = shorthand.split(" ")
    words = _common(_Fields(*fields)) if len(fields) == 5 else None
    if words is None:
        options = Options()
        options.use_24hour_time_format = True
        try:
            said = ExpressionDescriptor(shorthand, options).get_description()
        except (FormatException, MissingFieldException, WrongArgumentException):
            # No words for it: the expression says it anyway.
            return f"{text} ({zone.key})"
        words = said[:1].lower() + said[1:]
    return f"{words} ({zone.key})"
