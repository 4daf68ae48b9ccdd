"""Whose prompts share the prefix cache (gateway/auth/cache_salt.py): a group's keys one salt, another
group or a key in none another, every ``shared`` group one; salts are HMAC-SHA256 under the gateway's
secret, so neither a scope's name nor another secret makes them."""

from __future__ import annotations

import hashlib
import hmac

from gateway.auth.cache_salt import SHARED_SCOPE, described, salt, scope
from gateway.auth.principal import Group, Principal

SECRET = b"s" * 32
RED, BLUE = Group("grp_red", "red"), Group("grp_blue", "blue")
ONE, TWO = Group("grp_one", "one", prefix_cache="shared"), Group("grp_two", "two", prefix_cache="shared")


def key(key_id: str, group: Group | None = None) -> Principal:
    return Principal(key_id, key_id, group=group)


def salt_of(principal: Principal, secret: bytes = SECRET) -> str:
    return salt(secret, scope(principal))


def test_a_groups_keys_share_one_salt_and_nobody_else_has_it() -> None:
    assert scope(key("key_a", RED)) == "group:grp_red" and scope(key("key_c")) == "key:key_c"
    red = {salt_of(key("key_a", RED)), salt_of(key("key_b", RED))}
    assert len(red) == 1
    others = {salt_of(key("key_c", BLUE)), salt_of(key("key_a")), salt_of(key("key_b"))}
    assert len(others) == 3 and not red & others  # a key in no group shares with itself only


def test_every_shared_group_has_one_salt() -> None:
    assert scope(key("key_a", ONE)) == scope(key("key_b", TWO)) == SHARED_SCOPE
    assert salt_of(key("key_a", ONE)) == salt_of(key("key_b", TWO)) != salt_of(key("key_a", RED))


def test_a_salt_is_hmac_sha256_hex_under_the_secret() -> None:
    made = salt_of(key("key_a", RED))
    assert made == hmac.new(SECRET, b"group:grp_red", hashlib.sha256).hexdigest()
    assert len(made) == 64 and made != hashlib.sha256(b"group:grp_red").hexdigest()
    assert salt_of(key("key_a", RED), b"t" * 32) != made  # another gateway's secret: another salt


def test_a_key_is_told_who_shares_with_it() -> None:
    assert described(key("key_a", RED))["scope"] == "group red"
    assert described(key("key_a", ONE))["scope"] == "shared"
    assert described(key("key_a"))["scope"] == "key"
