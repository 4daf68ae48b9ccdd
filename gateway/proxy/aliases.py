"""Model aliases: the names clients insist on (``claude-*``, ``gpt-5*``) that mean the served model.

Coding agents send their own model names (Claude Code's ``claude-…`` for its side requests, Codex's
defaults); an alias lets them reach the one model the backend serves. A pattern is an exact name or
a shell-style glob (:func:`fnmatch.fnmatchcase`: ``*``, ``?``, ``[…]``, case-sensitive). Exact names
are listed by ``/v1/models``; globs can't be listed. A key may have aliases of its own, exact names
mapped to a model (:attr:`gateway.auth.principal.Principal.aliases`): they win over the gateway's. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

_GLOB = frozenset("*?[")


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` matches more than itself."""
    return not _GLOB.isdisjoint(pattern)


@dataclass(frozen=True, slots=True)
class ModelAliases:
    """``served``: the model the backend serves; ``patterns``: the names and globs that mean it."""

    served: str
    patterns: tuple[str, ...] = ()

    def resolve(self, name: str, own: Mapping[str, str] | None = None) -> str:
        """The model ``name`` means: ``own[name]`` when the key has that alias, else the served one when
        it matches one of the gateway's aliases, else ``name`` itself."""
        if own is not None and name in own:
            return own[name]
        if name == self.served or not self.patterns:
            return name
        if any(
            name == pattern or (is_glob(pattern) and fnmatchcase(name, pattern)) for pattern in self.patterns
        ):
            return self.served
        return name

    def listed(self, own: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """The exact alias names of the served model (what ``/v1/models`` shows besides it): the key's
        own that mean it, then the gateway's that the key's own do not redirect."""
        own = own or {}
        mine = tuple(name for name, model in own.items() if model == self.served and name != self.served)
        gateway = tuple(p for p in self.patterns if not is_glob(p) and p != self.served and p not in own)
        return mine + gateway
