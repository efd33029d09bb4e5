"""The pydantic config schema of each node type (what ``nodes[].config`` may hold)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from monark.automations import cron
from monark.automations.template import has_placeholder
from monark.core.ids import Id, id_or_none
from monark.core.models import MAX_ID
from monark.core.net import UnsafeAddress, check_url
from monark.core.schemas import StrictModel

MAX_TIMEOUT = 30  # seconds a webhook may take

ModelKey = Field(
    description="Key of a model of this organization, e.g. 'tasks'.", min_length=1, max_length=40
)


def optional_model_key(description: str) -> Any:
    """A config's optional model key (``None`` when left out)."""
    return Field(None, description=description, max_length=40)


class NodeConfig(StrictModel):
    """Unknown keys are errors: a typo must not pass silently."""


class RecordTriggerConfig(NodeConfig):
    model: str = ModelKey


class RecordUpdatedConfig(RecordTriggerConfig):
    fields: list[str] = Field(
        default_factory=list,
        description="Run only when one of these fields changed; empty means any change.",
        max_length=50,
    )


class ManualConfig(NodeConfig):
    model: str | None = optional_model_key(
        "Optional model key: a test run then uses one of its records as {{record}}."
    )


class ScheduleConfig(NodeConfig):
    cron: str = Field(
        description="When it runs: a cron expression, minute hour day month weekday (e.g. "
        "'0 9 * * 1-5' is weekdays at 09:00), in the organization's time zone (Settings; "
        "UTC unless set). At "
        "most once a minute; it must fire at some date.",
        max_length=cron.MAX_LENGTH,
    )

    @field_validator("cron")
    @classmethod
    def _fires(cls, expression: str) -> str:
        """Refused with the reason: one that never fires, or fires more than once a minute."""
        try:
            return cron.check(expression)
        except cron.BadCron as err:
            raise ValueError(str(err)) from None


Operator = Literal[
    "equals",
    "not_equals",
    "contains",
    "not_contains",
    "greater_than",
    "less_than",
    "is_empty",
    "is_not_empty",
]
NO_VALUE_OPERATORS = ("is_empty", "is_not_empty")


class FieldMatchesConfig(NodeConfig):
    field: str = Field(
        description="Field key of the triggering record (or 'id').", min_length=1, max_length=40
    )
    operator: Operator = Field("equals", description="How the field is compared with value.")
    value: Any = Field(
        None, description="What to compare with (is_empty and is_not_empty take none)."
    )

    @field_validator("value", mode="after")
    @classmethod
    def _needs_value(cls, value: Any, info: ValidationInfo) -> Any:
        operator = info.data.get("operator", "equals")
        if operator not in NO_VALUE_OPERATORS and value is None:
            raise ValueError(f"the operator {operator} needs a value")
        if isinstance(value, dict | list):
            raise ValueError("give a string, number or true/false")
        return value


class CreateRecordConfig(NodeConfig):
    model: str = ModelKey
    values: dict[str, Any] = Field(
        description="Field key to value; strings may use placeholders such as {{record.title}}.",
        min_length=1,
    )


RECORD_ID_RULE = (
    f"Give a record id (a whole number from 1 to {MAX_ID}) or a placeholder that names one, "
    "such as {{record.id}} or {{nodes.<id>.record_id}}."
)


class UpdateRecordConfig(NodeConfig):
    model: str | None = optional_model_key(
        "Model key of the record to update; default: the trigger's model."
    )
    record_id: Id | str = Field(
        "{{record.id}}",
        description="Id of the record to update; default: the triggering record "
        "({{record.id}}); {{nodes.<id>.record_id}} names a record made by an earlier node.",
    )
    values: dict[str, Any] = Field(
        description="Only the fields to change; strings may use placeholders.", min_length=1
    )

    @field_validator("record_id", mode="wrap")
    @classmethod
    def _names_a_record(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> int | str:
        """An id, its digits or placeholders: a literal that is none of them fails every
        run. One plain message, not one per member of the union."""
        try:
            checked = handler(None if isinstance(value, bool) else value)
        except ValidationError:
            raise ValueError(RECORD_ID_RULE) from None
        literal = isinstance(checked, str) and not has_placeholder(checked)
        if literal and id_or_none(checked) is None:
            raise ValueError(RECORD_ID_RULE)
        return checked


class SendWebhookConfig(NodeConfig):
    url: str = Field(description="An http:// or https:// URL to POST JSON to.", max_length=2000)
    payload: dict[str, Any] | None = Field(
        None,
        description="The JSON body (strings may use placeholders); default: the automation, "
        "the trigger and the record.",
    )
    timeout_seconds: float = Field(
        5.0, gt=0, le=MAX_TIMEOUT, description="Give up after this long (seconds)."
    )

    @field_validator("url")
    @classmethod
    def _http_only(cls, url: str) -> str:
        """The rule of every address someone types (``check_url``), checked at save: a URL
        that can never be reached fails here, not at each run."""
        url = url.strip()
        if has_placeholder(url):
            raise ValueError("the URL cannot hold placeholders; put values in the payload")
        try:
            return check_url(url)
        except UnsafeAddress as err:
            raise ValueError(str(err)) from None

    @field_validator("timeout_seconds", mode="wrap")
    @classmethod
    def _seconds(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> float:
        """One message for any number out of range, NaN included."""
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(
                f"Give a number of seconds, more than 0 and at most {MAX_TIMEOUT}."
            ) from None


class AddAuditNoteConfig(NodeConfig):
    note: str = Field(
        description="Text for the audit log; may use {{record.id}}, {{trigger.*}}, "
        "{{automation.*}} and {{nodes.*}}, never record values.",
        min_length=1,
        max_length=500,
    )
