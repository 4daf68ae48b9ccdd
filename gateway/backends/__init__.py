"""The backend pairs behind the gateway, each one owning what concerns it alone: its upstream client
(:mod:`.upstream`, the seam; :mod:`.aiohttp_upstream`, the client), the bound of the prompt counts
sent to it outside the slots (:mod:`.counting`), its circuit (:mod:`.breaker`), what the gateway
learnt of it while serving (:mod:`.traits`), its ``/metrics`` poll and health (:mod:`.monitor`); and
all of them together, with the choice of one for a request (:mod:`.pool`).

Only the request path (:mod:`gateway.proxy`, the inference handlers of :mod:`gateway.http`) and the
app that builds them import this package (import-linter contracts in ``pyproject.toml``).
"""
