"""Settings refused at start rather than failing requests later."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config import Settings


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"slots": 2, "max_n": 3}, "max_n"),  # a request of 3 sequences could never hold 2 slots
        ({"jwt_secret": "short"}, "jwt_secret"),  # RFC 7518 section 3.2: 32 characters for HS256
        ({"metrics_token": "short"}, "metrics_token"),
    ],
)
def test_unusable_settings_are_refused(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        Settings(upstream="http://127.0.0.1:8000", **fields)
