"""What a key change may say: the bodies of ``POST /admin/keys``, ``PATCH /admin/keys/{id}`` and
``…/rotate``, validated once here for the admin API and the local CLI alike (no web framework).

Every number has a bound the database's integer columns hold. A key's thinking default is given as
any level or ``reasoning_effort`` a request accepts (:mod:`gateway.dialects.thinking`) and kept as
its DeepSeek-V4 level (``medium`` → ``high``), which is what a request without its own choice gets.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from dspark_common import json_codec
from gateway.admin.durations import expires_after, parse_duration
from gateway.auth.groups import check_group_name
from gateway.auth.store import METADATA_BYTES, METADATA_DEPTH, check_aliases, check_name
from gateway.body.json_limits import deeper_than
from gateway.dialects.thinking import EFFORT_MAP, LEVELS, Level

#: The largest limit a key may have: PostgreSQL's ``integer`` (SQLAlchemy ``Integer``).
INT_MAX = 2**31 - 1
#: A key's or a group's name: what listings, the ledger and the audit trail show.
NAME_PATTERN = r"^[A-Za-z0-9._:@\-]+$"
#: The largest quota: PostgreSQL's ``bigint``.
QUOTA_MAX = 2**63 - 1
#: The longest rotation grace period, s (ten years).
GRACE_MAX_S = 10 * 365 * 86_400
#: A key's thinking default as given -> as kept: the levels, and every ``reasoning_effort``.
THINKING_CHOICES: dict[str, Level] = {**{level: level for level in LEVELS}, **EFFORT_MAP}


def thinking_level(value: str) -> Level:
    """A key's thinking default as kept (:data:`THINKING_CHOICES`, any case); ``ValueError`` otherwise."""
    level = THINKING_CHOICES.get(value.lower())
    if level is None:
        raise ValueError(f"must be one of {', '.join(THINKING_CHOICES)}; got {value!r}")
    return level


def _duration(value: object) -> object:
    """A lifetime written as the CLI's ``--expires-in`` is (``30d``: :func:`parse_duration`)."""
    if value is None or isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError('must be a duration such as "30d" or "12h"')
    return parse_duration(value)


#: A thinking default as given (:data:`THINKING_CHOICES`), documented with its choices.
ThinkingChoice = Annotated[str, WithJsonSchema({"type": "string", "enum": list(THINKING_CHOICES)})]
Lifetime = Annotated[
    timedelta,
    BeforeValidator(_duration),
    WithJsonSchema({"type": "string", "examples": ["30d", "12h"]}),
]


class SharedFields(BaseModel):
    """What keys and groups both have: a token quota (:mod:`gateway.limits.quota`), free-form labels."""

    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Any] | None = Field(default=None, description="Free-form labels (team, owner …)")

    quota_tokens: int | None = Field(
        default=None,
        ge=1,
        le=QUOTA_MAX,
        description="Token quota: the cost (tokens, weighted by GATEWAY_QUOTA_WEIGHTS) its requests may "
        "spend a quota_period; null: none",
    )
    quota_period: Literal["day", "week", "month"] | None = Field(
        default=None, description="The quota's UTC calendar period; null: month"
    )
    quota_mode: Literal["enforce", "warn"] | None = Field(
        default=None,
        description="enforce: refuse past it (429 quota_exceeded); warn: only report it; null: enforce",
    )

    @field_validator("metadata")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """Metadata nests at most :data:`~gateway.auth.store.METADATA_DEPTH` levels and takes at most
        :data:`~gateway.auth.store.METADATA_BYTES` bytes as JSON (what every listing carries)."""
        if value is not None:
            if deeper_than(value, METADATA_DEPTH):
                raise ValueError(f"metadata may nest at most {METADATA_DEPTH} levels")
            if len(json_codec.dumps(value)) > METADATA_BYTES:
                raise ValueError(f"metadata may take at most {METADATA_BYTES} bytes as JSON")
        return value


class KeyLimits(SharedFields):
    """Limits and options of a key; every field optional (None: unlimited / default)."""

    expires_at: datetime | None = Field(default=None, description="UTC expiry (ISO 8601); null: never")
    expires_in: Lifetime | None = Field(
        default=None,
        description='Lifetime from now instead of expires_at: a number and a unit s|m|h|d|w ("30d")',
    )
    models: list[str] | None = Field(
        default=None, min_length=1, description="Model allow-list; null: every model"
    )
    rpm: int | None = Field(default=None, ge=1, le=INT_MAX, description="Requests per minute")
    tpm: int | None = Field(
        default=None, ge=1, le=INT_MAX, description="Tokens per minute (prompt + completion)"
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, le=INT_MAX, description="Requests in flight at once"
    )
    priority: int | None = Field(default=None, ge=1, le=100, description="Weight in the fair queue")
    default_thinking: ThinkingChoice | None = Field(
        default=None,
        description="Thinking of the key's requests that choose none: a level or a reasoning_effort, "
        "kept as its level (medium: high)",
    )
    aliases: dict[str, str] | None = Field(
        default=None,
        description="Model names this key may ask for -> the model served for them "
        '({"gpt-4o": "deepseek-v4-flash"}); they win over GATEWAY_MODEL_ALIASES',
    )
    max_wait_s: float | None = Field(
        default=None,
        gt=0,
        le=86400,
        description="Longest queue wait, s, of the key's requests that name none (x-max-wait-s): one "
        "expected to wait longer is refused at once (429 wait_too_long); null: as the queue allows",
    )
    request_class: Literal["interactive", "batch"] | None = Field(
        default=None,
        description="The class of the key's requests (interactive ahead of batch in the queue) and the "
        "highest they may ask for (x-priority); null: interactive",
    )
    group: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The group (id or name) whose limits and quota it shares; null: none",
    )

    @field_validator("aliases")
    @classmethod
    def _aliases(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        check_aliases(value)
        return value

    @field_validator("default_thinking")
    @classmethod
    def _level(cls, value: str | None) -> str | None:
        return None if value is None else thinking_level(value)

    @model_validator(mode="after")
    def _one_expiry(self) -> KeyLimits:
        """``expires_in`` becomes ``expires_at`` (from now); the two together are refused."""
        if self.expires_in is not None:
            if "expires_at" in self.model_fields_set:
                raise ValueError("give expires_at or expires_in, not both")
            self.expires_at = expires_after(self.expires_in)
        return self

    def changes(self) -> dict[str, Any]:
        """The fields this body sets (null included: back to unlimited / default), as the key store
        names them (``expires_in`` already made ``expires_at``)."""
        return self.model_dump(exclude_unset=True, exclude={"expires_in"})


class KeyCreate(KeyLimits):
    """``POST /admin/keys`` body."""

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    scopes: list[Literal["admin", "backend_fields"]] = Field(
        default_factory=list,
        description='["admin"] for an admin key; "backend_fields" lets it set vLLM\'s scheduling, '
        "template and KV fields (gateway/dialects/fields.py)",
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        check_name(value)
        return value

    def fields(self) -> dict[str, Any]:
        """The new key's options as :meth:`KeyStore.create <gateway.auth.KeyStore.create>` takes them
        (unset and null ones left to its defaults)."""
        return self.model_dump(exclude_none=True, exclude={"name", "expires_in"})


class KeyRotate(BaseModel):
    """``POST /admin/keys/{id}/rotate`` body."""

    model_config = ConfigDict(extra="forbid")

    grace_s: float | None = Field(
        default=None, ge=0, le=GRACE_MAX_S, description="How long the old secret still works, s"
    )


class GroupLimits(SharedFields):
    """``PATCH /admin/groups/{id}`` body: what a group's keys share; every field optional (null:
    unlimited / none)."""

    rpm: int | None = Field(default=None, ge=1, le=INT_MAX, description="Requests per minute, all its keys")
    tpm: int | None = Field(default=None, ge=1, le=INT_MAX, description="Tokens per minute, all its keys")
    prefix_cache: Literal["group", "shared"] | None = Field(
        default=None,
        description="Whose cached prompt prefixes its keys reuse: group, its own keys' only; shared, "
        "every shared group's; null: group (docs/prefix-cache.md)",
    )

    def changes(self) -> dict[str, Any]:
        """The fields this body sets (null included)."""
        return self.model_dump(exclude_unset=True)


class GroupCreate(GroupLimits):
    """``POST /admin/groups`` body."""

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        check_group_name(value)
        return value

    def fields(self) -> dict[str, Any]:
        """The new group's fields (unset and null ones left out)."""
        return self.model_dump(exclude_none=True, exclude={"name"})
