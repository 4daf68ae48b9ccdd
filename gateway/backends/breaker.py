"""A backend's circuit breaker: requests stop hammering a backend that keeps failing.

*Closed* while the backend answers. A refused connection opens it at once (the backend is down, e.g.
restarting), as do :data:`THRESHOLD` failures in a row that show it is not serving
(:data:`DOWN_STATUSES`: 502, 503, 504 answers, or silence past the read timeout, before the headers). A
500 is not one: vLLM answers it for the input of one request it fails on (a client repeating such a
request must not shut the backend for every key), and when its engine dies it stops serving: its
connections are refused and its ``/health`` fails (the monitor). While *open*, no request is sent: they
wait (the gateway's restart hold) or are refused. After the cool-down, :data:`BASE_S` doubled at each
opening up to :data:`MAX_S`, one trial request goes (*half-open*) while the others keep waiting; its
success closes the circuit, its failure opens it again for a longer cool-down. The pattern: Nygard,
*Release It!* (2007), "Circuit Breaker". A circuit opened by a refused connection also closes when the
backend's monitor reaches it again (:meth:`Breaker.reachable`). Pure: time comes from the caller.
"""

from __future__ import annotations

#: Failures in a row (not refused connections: those open the circuit at once) that open it.
THRESHOLD = 3
#: The answers, before the headers of a response, that count as the backend failing (a timeout is
#: answered 504): the server, or what stands in front of it, is not serving.
DOWN_STATUSES = frozenset({502, 503, 504})
#: First cool-down, s; doubled at each opening in a row.
BASE_S = 1.0
#: Longest cool-down, s.
MAX_S = 30.0


class Breaker:
    """One backend's circuit. ``state`` is ``closed``, ``open`` or ``half_open``; ``unreachable_since``:
    when (monotonic s) the failures in a row that keep it unreachable began with a refused connection,
    None while it answers — the start of an outage, which the requests held for a restart count their
    hold from (:meth:`~gateway.proxy.placement.Placement.open_when_back`)."""

    def __init__(self) -> None:
        self._failures = 0
        self._openings = 0
        self._until = 0.0
        self._trial = False
        self._refused = False  # opened by a refused connection (not by failed answers)
        self.unreachable_since: float | None = None

    @property
    def state(self) -> str:
        if self._trial:
            return "half_open"
        return "open" if self._openings else "closed"

    def allows(self, now: float) -> bool:
        """Whether a request may go to the backend at ``now`` (monotonic s): closed; or the cool-down
        is over and no trial is out, and then this request is the trial."""
        if not self._openings:
            return True
        if self._trial or now < self._until:
            return False
        self._trial = True
        return True

    def wait_s(self, now: float, trial_s: float) -> float:
        """How long, from ``now``, until :meth:`allows` may let a request go: 0 when closed, the rest
        of the cool-down when open, ``trial_s`` (look again then) while a trial is out."""
        if not self._openings:
            return 0.0
        return trial_s if self._trial else max(0.0, self._until - now)

    def success(self) -> None:
        """The backend answered: closed."""
        self._failures = self._openings = 0
        self._trial = self._refused = False
        self.unreachable_since = None

    def reachable(self) -> None:
        """The backend's monitor reached it (its ``/metrics`` answered): a circuit opened because it
        refused connections closes (it is back from a restart); one opened by failed answers stays."""
        if self._refused:
            self.success()

    def failure(self, now: float, refused: bool = False) -> None:
        """The backend failed a request (``refused``: it could not be reached at all)."""
        self._failures += 1
        if refused and self.unreachable_since is None:
            self.unreachable_since = now
        if self._openings and not self._trial:
            return  # open already: a request sent before it opened failed late
        self._refused = refused
        if refused or self._trial or self._failures >= THRESHOLD:
            self._until = now + min(MAX_S, BASE_S * 2**self._openings)
            self._openings += 1
            self._trial = False

    def given_up(self) -> None:
        """A trial that ended before the backend answered (its client left): another may go."""
        self._trial = False
