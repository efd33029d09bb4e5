"""What an automation may do with a private record's values.

The rule: a value read from a record never becomes readable by someone who could not read
that record. A private record is read by its creator and by roles with
``records.view_private``; so is everything a run for it produces:

- By default a private record's events run no automation at all (``SKIP``).
- An admin may opt an automation in (``KEEP``): it then runs for private records as a
  principal *confined* to the record's readers (``Principal.confined_to``). The records
  services make whatever it creates private to the same creator and refuse to write into a
  record anyone else may read; its audit notes are shown only to the record's readers
  (``core.events`` marks them, the audit log hides them); its webhooks are not sent.
- ``SEND`` is ``KEEP`` with the webhooks sent: the admin who chose it decided that the
  endpoints may receive private records.

A run's stored steps keep its data from whoever may not read a private record
(``services.shown_steps``), and the owner must be able to read the record for it to run.
"""

from __future__ import annotations

from enum import StrEnum

from monark.core.rbac import Principal
from monark.records.queries import reads


class PrivateRecords(StrEnum):
    """What a private record's events do to an automation (``Automation.private_records``)."""

    SKIP = "skip"
    KEEP = "keep"
    SEND = "send"

    @property
    def title(self) -> str:
        """The choice in a few words (its radio button's label)."""
        return {
            PrivateRecords.SKIP: "Skip private records",
            PrivateRecords.KEEP: "Run for them, keep the results private",
            PrivateRecords.SEND: "Run for them, keep the results private, send webhooks",
        }[self]

    @property
    def label(self) -> str:
        """How the automation's page says it."""
        return {
            PrivateRecords.SKIP: "Private records do not trigger it",
            PrivateRecords.KEEP: "Runs for private records; what it writes stays private, "
            "no webhook is sent",
            PrivateRecords.SEND: "Runs for private records; what it writes stays private, "
            "webhooks are sent with their values",
        }[self]


WITHHELD_WEBHOOK = (
    "Not sent: this run is for a private record, and this automation sends no private "
    "record to webhooks (an admin can allow it on the automation's page)."
)


def runs_for(setting: str, owner: Principal | None, private_to: int | None) -> bool:
    """Whether an automation runs for a record whose readers ``private_to`` names
    (``records.index.private_to``): always for the org's records; for a private one only
    when it was opted in and its owner (None: it has none) may read the record."""
    if private_to is None:
        return True
    if setting not in (PrivateRecords.KEEP, PrivateRecords.SEND):
        return False
    return owner is not None and owner.can("records.view") and reads(owner, private_to)
