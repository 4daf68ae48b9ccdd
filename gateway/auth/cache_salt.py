"""Which prompts may share vLLM's prefix cache: the ``cache_salt`` the gateway gives every request.

vLLM's prefix cache is one pool for every client of the backend: a request whose prompt starts with
blocks another request computed reuses them, and its usage (``cached_tokens``,
``cache_read_input_tokens``) and its time to first token tell the client so — whoever sent the first
request. A prompt's first block is hashed with the request's ``cache_salt`` (vLLM
``generate_block_hash_extra_keys``), and every later block chains from it, so two requests with
different salts share no block at all. OpenAI's prompt caches are not shared between organizations;
here a group of keys (a team) is the unit:

==============================  =====================  ==================================================
the key                         scope                  shares cached prefixes with
==============================  =====================  ==================================================
in a group, ``prefix_cache``    ``group:<group id>``   the other keys of its group, and no one else
``group`` (the default)
in a group, ``prefix_cache``    ``shared``             every key of every ``shared`` group (one pool:
``shared``                                             a group that shares, shares with all that do)
in no group                     ``key:<key id>``       its own requests only
==============================  =====================  ==================================================

The salt is ``HMAC-SHA256(secret, scope)`` in hex (64 characters: vLLM takes up to 128): a client
that knows its scope and others' ids still cannot make another scope's salt without the secret
(``GATEWAY_CACHE_SALT_SECRET``, else one generated once and kept in the database:
:func:`gateway.storage.secrets.shared_secret`), so every replica salts alike. A client may not send a
``cache_salt`` of its own (:mod:`gateway.dialects.fields`); the gateway's is spliced last into every
body it sends the backend and wins. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac

from gateway.auth.principal import Principal

#: A group's ``prefix_cache`` settings: its keys share with each other only, or with every ``shared`` group.
PREFIX_CACHE_MODES = ("group", "shared")
#: The scope of every key of a ``shared`` group.
SHARED_SCOPE = "shared"
#: The name of the generated secret in the database.
SECRET_NAME = "cache_salt"


def scope(principal: Principal) -> str:
    """Whose cached prefixes ``principal``'s requests may reuse (see the module doc)."""
    group = principal.group
    if group is None:
        return f"key:{principal.key_id}"
    if group.prefix_cache == "shared":
        return SHARED_SCOPE
    return f"group:{group.id}"


def salt(secret: bytes, scope_: str) -> str:
    """The ``cache_salt`` of ``scope_``: HMAC-SHA256 under ``secret``, hex (64 characters)."""
    return hmac.new(secret, scope_.encode(), hashlib.sha256).hexdigest()


def described(principal: Principal) -> dict[str, str]:
    """What ``GET /v1/key`` says of it: ``{"scope": "group <name>" | "key" | "shared", "shared_with"}``."""
    group = principal.group
    if group is None:
        return {"scope": "key", "shared_with": "this key's own requests only"}
    if group.prefix_cache == "shared":
        return {"scope": SHARED_SCOPE, "shared_with": "every key of every group whose prefix_cache is shared"}
    return {"scope": f"group {group.name}", "shared_with": f"the keys of group {group.name} only"}
