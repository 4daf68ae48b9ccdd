"""The gateway's commands (typer): ``keys``, ``groups``, ``batches``, ``files``, ``db``, ``token`` and the
reads (usage, audit, requests, status) on the database or a running gateway's admin API, and
``serve``'s server (:mod:`gateway.cli.serve`). :mod:`dspark_cli` mounts them in the one command line,
on :data:`app`."""

from gateway.cli.batches import batches_app, files_app
from gateway.cli.db import db_app
from gateway.cli.groups import groups_app
from gateway.cli.keys import keys_app
from gateway.cli.main import app, token
from gateway.cli.reads import audit, requests, status, usage

READS = (usage, audit, requests, status)

__all__ = ["READS", "app", "batches_app", "db_app", "files_app", "groups_app", "keys_app", "token"]
