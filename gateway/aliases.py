"""Model aliases: the names clients insist on (``claude-*``, ``gpt-5*``) that mean the served model.

Coding agents send their own model names (Claude Code's ``claude-…`` for its side requests, Codex's
defaults); an alias lets them reach the one model the backend serves. A pattern is an exact name or
a shell-style glob (:func:`fnmatch.fnmatchcase`: ``*``, ``?``, ``[…]``, case-sensitive). Exact names
are listed by ``/v1/models``; globs can't be listed. Pure.
"""

from __future__ import annotations

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

    def resolve(self, name: str) -> str:
        """The model ``name`` means: the served one when it matches an alias, else ``name`` itself."""
        if name == self.served or not self.patterns:
            return name
        if any(
            name == pattern or (is_glob(pattern) and fnmatchcase(name, pattern)) for pattern in self.patterns
        ):
            return self.served
        return name

    def listed(self) -> tuple[str, ...]:
        """The exact alias names (what ``/v1/models`` shows besides the served model)."""
        return tuple(p for p in self.patterns if not is_glob(p) and p != self.served)
