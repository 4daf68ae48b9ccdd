"""Who the CLI is in the audit trail when it acts on the database itself (no gateway running).

Apart from :mod:`gateway.cli.local` so that commands that audit nothing (``db``, a refused ``serve``)
do not import the admin layer and, through it, the gateway's authentication and dialects."""

from __future__ import annotations

import os
import pwd

from gateway.admin.key_admin import Actor
from gateway.auth import Principal


def local_actor() -> Actor:
    """The audit trail's actor for the CLI on the database: ``cli:<user>`` from client ``local``. The
    user is the process's real one (its uid's passwd entry, its uid without one), not ``$USER``."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return Actor(Principal(key_id=f"cli:{user}", name=f"cli:{user}", kind="cli"), "local")
