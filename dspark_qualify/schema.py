"""A tiny JSON-Schema checker for the closed-world schemas the proof sends (no runtime dependency).

Covers exactly what a strict OpenAI ``json_schema`` uses here: ``type`` (object, string, number,
integer, boolean), ``properties``, ``required``, ``additionalProperties: false`` and ``enum``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["schema_errors"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
}


def schema_errors(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Every way ``value`` breaks ``schema`` (empty list: it matches)."""
    expected = schema.get("type")
    if expected is not None:
        types = _TYPES[expected]
        if not isinstance(value, types) or (expected in ("number", "integer") and isinstance(value, bool)):
            return [f"{path}: expected {expected}, got {type(value).__name__}"]
    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        errors += [f"{path}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{path}: unexpected {k!r}" for k in value if k not in props]
        for key, sub in props.items():
            if key in value:
                errors += schema_errors(value[key], sub, f"{path}.{key}")
    return errors
