"""The items of one array of a JSON body, taken one at a time as the body arrives, each bounded in
shape as a request body is. Pure: no web framework.

A body too large to hold whole (a message batch's ``requests``) is fed here a piece at a time
(:meth:`ItemStream.feed`). ijson's push parser (its C backend) turns the pieces into events, and the
items of the array under the top-level object's key ``key`` are built from them one at a time
(ijson's ``ObjectBuilder``), so only the item being built is held. Each item's shape is counted from
its events as it is built, and refused as soon as it passes ``limits`` (:class:`JsonLimits`: values,
strings with keys, objects and arrays, depth), as is the rest of the body (everything outside the
items, counted once against the same ``limits``): nothing costs more to build than a request body.
Numbers are read as ``int`` / ``float``, as orjson reads them.
"""

from __future__ import annotations

from typing import Any

import ijson

from gateway.body.json_limits import JsonLimits
from gateway.errors import GatewayError

_OPEN = frozenset({"start_map", "start_array"})
_CLOSE = frozenset({"end_map", "end_array"})


class _Shape:
    """The shape of one value counted event by event against ``limits``; ``what`` names it in errors."""

    def __init__(self, limits: JsonLimits, what: str) -> None:
        self.limits = limits
        self.what = what
        self.values = self.strings = self.containers = self.depth = 0

    def count(self, event: str) -> None:
        """One more event (ijson's basic events); raises :class:`GatewayError` past a limit."""
        limits = self.limits
        if event in _CLOSE:
            self.depth -= 1
            return
        if event == "map_key":
            self.strings += 1
        else:
            self.values += 1
            if event == "string":
                self.strings += 1
            elif event in _OPEN:
                self.containers += 1
                self.depth += 1
                if self.depth > limits.max_depth:
                    message = f"{self.what} is nested more than {limits.max_depth} levels deep."
                    raise GatewayError("invalid_request", message, param=self.what)
                if self.containers > limits.max_containers:
                    raise self._too_complex(f"{limits.max_containers} objects and arrays")
            if self.values > limits.max_values:
                raise self._too_complex(f"{limits.max_values} values")
        if self.strings > limits.max_strings:
            raise self._too_complex(f"{limits.max_strings} strings")

    def _too_complex(self, what: str) -> GatewayError:
        return GatewayError("request_too_complex", f"{self.what} holds more than {what}.", param=self.what)


class ItemStream:
    """The items of the array under key ``key`` of a JSON object fed in pieces, each within ``limits``.

    :meth:`feed` returns the items a piece completed; :meth:`close` (once the body ended) the last
    ones, and raises when the body is not JSON or stops short. ``arrays`` says how many arrays came
    under ``key`` (the caller decides what none, or a value that is not an array, means).
    Raises :class:`GatewayError`: 400 ``invalid_request`` (not JSON, too deep), 413
    ``request_too_complex`` (an item, or the rest, past ``limits``), ``param`` ``<key>.<n>``."""

    def __init__(self, key: str, limits: JsonLimits) -> None:
        self._key = key
        self._limits = limits
        self._events = ijson.sendable_list()
        self._parser = ijson.basic_parse_coro(self._events, use_float=True)
        self._outside = _Shape(limits, "The body")
        self._last_key: str | None = None
        self._in_array = False
        self._item: tuple[ijson.ObjectBuilder, _Shape] | None = None
        self.arrays = 0
        self.items = 0

    def feed(self, data: bytes) -> list[Any]:
        """The items completed by ``data``, the body's next piece."""
        if not data:  # ijson reads an empty piece as the end
            return []
        try:
            self._parser.send(data)
        except ijson.JSONError as exc:
            raise _not_json(exc) from None
        return self._take()

    def close(self) -> list[Any]:
        """The items completed by the body's end."""
        try:
            self._parser.close()
        except ijson.JSONError as exc:
            raise _not_json(exc) from None
        return self._take()

    def _take(self) -> list[Any]:
        done: list[Any] = []
        for event, value in self._events:
            if self._item is not None:
                builder, shape = self._item
            elif self._in_array and event == "end_array":
                self._in_array = False
                self._outside.count(event)
                continue
            elif self._in_array:
                builder, shape = ijson.ObjectBuilder(), _Shape(self._limits, f"{self._key}.{self.items}")
                self._item = builder, shape
            else:
                self._look(event, value)
                continue
            shape.count(event)
            builder.event(event, value)
            if shape.depth == 0:  # the item ended (a scalar ends where it begins)
                done.append(builder.value)
                self._item = None
                self.items += 1
        del self._events[:]
        return done

    def _look(self, event: str, value: Any) -> None:
        """An event outside the items: counted; the array under the key, when it begins."""
        outer_depth = self._outside.depth
        self._outside.count(event)
        if outer_depth == 1 and event == "map_key":
            self._last_key = value
        elif outer_depth == 1 and event == "start_array" and self._last_key == self._key:
            self._in_array = True
            self.arrays += 1


def _not_json(exc: Exception) -> GatewayError:
    first = str(exc).split("\n", 1)[0]
    return GatewayError("invalid_request", f"The body is not valid JSON: {first}")
