"""The console's key and group forms: a form's text read into the admin API's fields, and a refusal
named field by field (:mod:`gateway.console.forms`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.admin.key_fields import KeyCreate, KeyLimits
from gateway.console import forms


def test_each_kind_of_field_is_read_as_the_admin_api_takes_it() -> None:
    form = {
        "models": "a, b,",
        "aliases": "gpt-4o=deepseek, x=y",
        "metadata": '{"team": "search"}',
        "max_wait_s": "2m",
        "expires": "2027-01-31T00:00Z",
        "rpm": "60",
        "tpm": "",
        "quota_period": "week",
    }
    edited = forms.body(KeyLimits, form, forms.KEY_FIELDS, edit=True)
    assert edited.changes() == {
        "models": ["a", "b"],
        "aliases": {"gpt-4o": "deepseek", "x": "y"},
        "metadata": {"team": "search"},
        "max_wait_s": 120.0,
        "expires_at": datetime(2027, 1, 31, tzinfo=UTC),
        "rpm": 60,
        "tpm": None,  # emptied on an edit: unlimited
        "quota_period": "week",
    }
    made = forms.body(
        KeyCreate, {"expires": "30d", "tpm": ""}, forms.KEY_FIELDS, edit=False, extra={"name": "n"}
    )
    assert made.fields().keys() == {"expires_at", "scopes"}  # a create leaves an empty field out
    assert made.expires_at - datetime.now(UTC) > timedelta(days=29)


def test_a_refusal_names_every_bad_field_at_once() -> None:
    """Those whose text cannot be read and those the model refuses, together; in the form's words."""
    form = {"expires": "soon", "metadata": "{", "max_wait_s": "x", "rpm": "abc", "priority": "500"}
    with pytest.raises(forms.FormError) as refused:
        forms.body(KeyLimits, form, forms.KEY_FIELDS, edit=True)
    assert set(refused.value.errors) == {"expires", "metadata", "max_wait_s", "rpm", "priority"}
    assert refused.value.errors["metadata"] == "must be a JSON object"


def test_durations_are_written_in_their_largest_whole_unit() -> None:
    assert [forms.duration_text(s) for s in (86_400, 3600 * 36, 90, 1.5, 604_800, None)] == [
        "1d", "36h", "90s", "1.5s", "1w", "",
    ]  # fmt: skip
    assert forms.seconds("0") == 0 and forms.seconds("24h") == 86_400


def test_a_record_is_shown_as_its_form_reads_it_back() -> None:
    record = {
        "models": ["m"],
        "aliases": {"a": "m"},
        "metadata": {"k": "ü"},
        "max_wait_s": 300.0,
        "expires_at": "2027-01-31T00:00:00+00:00",
        "quota_tokens": 10,
        "quota_period": "week",
    }
    shown = forms.shown(record)
    again = forms.body(KeyLimits, shown, forms.KEY_FIELDS, edit=True)
    assert again.models == ["m"] and again.aliases == {"a": "m"} and again.metadata == {"k": "ü"}
    assert again.max_wait_s == 300.0 and again.expires_at == datetime(2027, 1, 31, tzinfo=UTC)
    assert (shown["quota_period"], shown["rpm"], shown["group"]) == ("week", "", "")
