"""Request bodies within bounds: reading one (:mod:`~gateway.body.read`: size, time) and parsing its
JSON (:mod:`~gateway.body.json_limits`: depth, width, string and number sizes)."""
