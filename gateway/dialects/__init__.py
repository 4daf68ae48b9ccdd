"""API dialects: one module per client API behind :class:`~gateway.dialects.base.Dialect`."""

from gateway.dialects.base import Context, Dialect, Parsed, Prepared, Translator

__all__ = ["Context", "Dialect", "Parsed", "Prepared", "Translator"]
