"""The console's key and group forms: what each field is (label, kind of input, choices), a form's text
turned into the admin API's body fields, and a refusal turned into one message per field, so a page can
show the form again as it was typed with the bad field named. Pure: no web framework.

A field's text, by kind: ``number``; ``list`` (comma-separated); ``pairs`` (``a=b, c=d``); ``json``
(an object, read as the admin API reads bodies); ``select`` (one of its choices); ``expiry`` (a
duration from now such as ``30d``, an ISO 8601 time, or empty: never); ``seconds`` (a duration
``90s`` / ``2m`` or a number of seconds). An empty field is null on an edit (unlimited / the default)
and left out on a create.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from gateway.admin.durations import parse_duration
from gateway.body.json_limits import ADMIN, parse_object
from gateway.dialects.thinking import LEVELS
from gateway.errors import GatewayError

Kind = Literal["number", "text", "list", "pairs", "json", "select", "expiry", "seconds"]


@dataclass(frozen=True, slots=True)
class Field:
    """One form field: its body ``name``, ``label``, ``kind``, ``choices`` of a select (value, text;
    the first is the empty choice: null), ``hint`` shown under it."""

    name: str
    label: str
    kind: Kind = "number"
    choices: tuple[tuple[str, str], ...] = ()
    hint: str = ""


def _choices(default: str, *values: str) -> tuple[tuple[str, str], ...]:
    """A select's choices: empty (null: ``default``), then ``values`` as they are."""
    return (("", default), *((value, value) for value in values))


FIELDS = {
    spec.name: spec
    for spec in (
        Field("models", "Models", "list", hint="comma-separated; empty: every model"),
        Field("rpm", "Requests per minute"),
        Field("tpm", "Tokens per minute"),
        Field("max_concurrency", "Requests at once"),
        Field("priority", "Priority", hint="weight in the fair queue, 1–100; empty: 1"),
        Field("group", "Group", "select"),
        Field("quota_tokens", "Token quota"),
        Field("quota_period", "Quota period", "select", _choices("month (default)", "day", "week", "month")),
        Field("quota_mode", "Quota mode", "select", _choices("enforce (default)", "enforce", "warn")),
        Field("default_thinking", "Thinking default", "select", _choices("the gateway's default", *LEVELS)),
        Field("request_class", "Request class", "select", _choices("interactive", "interactive", "batch")),
        Field("max_wait_s", "Longest queue wait", "seconds", hint="90s, 5m; empty: as the queue allows"),
        Field("aliases", "Aliases", "pairs", hint="name=model, …"),
        Field("expires", "Expires", "expiry", hint="30d or 12h from now, or 2027-01-31T00:00Z; empty: never"),
        Field("metadata", "Metadata", "json", hint='JSON object, {"team": "search"}'),
        Field(
            "prefix_cache",
            "Prefix cache",
            "select",
            _choices("group (default)", "group", "shared"),
            hint="group: cached prompts reused by its own keys only; shared: by every shared group",
        ),
    )
}
#: The fields of a key's forms, and of a group's, in the order they are shown.
KEY_FIELDS = tuple(name for name in FIELDS if name != "prefix_cache")
GROUP_FIELDS = ("rpm", "tpm", "quota_tokens", "quota_period", "quota_mode", "prefix_cache", "metadata")


class FormError(Exception):
    """A form refused: ``errors`` maps a field's name (or ``form``) to what is wrong with it."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))
        self.errors = dict(errors)


def select(spec: Field, extra: Iterable[str] = ()) -> tuple[tuple[str, str], ...]:
    """A select's choices: its own, or for ``group`` none (empty) and then each of ``extra``."""
    if spec.name == "group":
        return (("", "none"), *((name, name) for name in extra))
    return spec.choices


def body(
    model: type[BaseModel],
    form: Mapping[str, str],
    names: Iterable[str],
    edit: bool,
    extra: Mapping[str, Any] | None = None,
) -> Any:
    """``model`` made of ``form``'s ``names`` and ``extra``: each field's text read by its kind (the
    admin API's names: ``expires`` gives ``expires_in`` or ``expires_at``; empty: null on an edit, left
    out on a create); :class:`FormError` naming every bad field at once, those whose text cannot be
    read and those the model refuses."""
    fields, errors = _fields(form, names, edit)
    try:
        made = validated(model, {**fields, **(extra or {})})
    except FormError as refused:
        errors = {**refused.errors, **errors}
    if errors:
        raise FormError(errors)
    return made


def _fields(
    form: Mapping[str, str], names: Iterable[str], edit: bool
) -> tuple[dict[str, Any], dict[str, str]]:
    fields: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name in names:
        if name not in form:
            continue
        text = form[name].strip()
        if not text:
            if edit:
                fields["expires_at" if name == "expires" else name] = None
            continue
        try:
            fields.update(_read(FIELDS[name], text))
        except ValueError as exc:
            errors[name] = str(exc)
        except GatewayError as exc:  # the admin API's JSON reader: its words are about a body
            errors[name] = "too large or nested too deep" if exc.status == 413 else "must be a JSON object"
    return fields, errors


def _read(spec: Field, text: str) -> dict[str, Any]:
    if spec.kind == "list":
        return {spec.name: [item.strip() for item in text.split(",") if item.strip()]}
    if spec.kind == "pairs":
        pairs = (item.partition("=") for item in text.split(",") if item.strip())
        return {spec.name: {a.strip(): b.strip() for a, _, b in pairs}}
    if spec.kind == "json":
        return {spec.name: parse_object(text.encode(), ADMIN)}
    if spec.kind == "seconds":
        return {spec.name: seconds(text)}
    if spec.kind == "expiry":
        try:
            return {"expires_in": parse_duration(text)}
        except ValueError:
            pass
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError("a duration such as 30d, or a time such as 2027-01-31T00:00Z") from None
        return {"expires_at": when if when.tzinfo else when.replace(tzinfo=UTC)}
    return {spec.name: text}


def seconds(text: str) -> float:
    """A duration's text (``90s``, ``24h``) or a plain number of seconds (``0`` included), in s."""
    try:
        return float(text)
    except ValueError:
        return parse_duration(text).total_seconds()


def validated(model: type[BaseModel], fields: dict[str, Any]) -> Any:
    """``model`` made of ``fields``; :class:`FormError` naming each refused field (the model's
    ``expires_at`` / ``expires_in`` are the form's ``expires``)."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else "form"
            name = "expires" if name in ("expires_at", "expires_in") else name
            errors.setdefault(name, error["msg"].removeprefix("Value error, "))
        raise FormError(errors) from None


def duration_text(value: float | None) -> str:
    """Seconds as the largest unit that holds them whole (``86400`` -> ``1d``, ``90`` -> ``90s``)."""
    if value is None:
        return ""
    for unit, size in (("w", 604_800), ("d", 86_400), ("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:.0f}{unit}"
    return f"{value:g}s"


def shown(record: Mapping[str, Any]) -> dict[str, str]:
    """The text each form field shows for ``record`` (a key's or a group's ``public()`` view)."""
    aliases = record.get("aliases") or {}
    expires = record.get("expires_at")
    metadata = record.get("metadata")
    return {
        "models": ",".join(record.get("models") or ()),
        "rpm": _text(record.get("rpm")),
        "tpm": _text(record.get("tpm")),
        "max_concurrency": _text(record.get("max_concurrency")),
        "priority": _text(record.get("priority")),
        "group": record.get("group") or "",
        "quota_tokens": _text(record.get("quota_tokens")),
        "quota_period": record.get("quota_period") or "",
        "quota_mode": record.get("quota_mode") or "",
        "prefix_cache": record.get("prefix_cache") or "",
        "default_thinking": record.get("default_thinking") or "",
        "request_class": record.get("request_class") or "",
        "max_wait_s": duration_text(record.get("max_wait_s")),
        "aliases": ",".join(f"{a}={m}" for a, m in aliases.items()),
        "expires": datetime.fromisoformat(expires).strftime("%Y-%m-%dT%H:%MZ") if expires else "",
        "metadata": json.dumps(metadata, ensure_ascii=False) if metadata else "",
    }


def _text(value: object) -> str:
    return "" if value is None else str(value)
