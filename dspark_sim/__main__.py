"""``python -m dspark_sim``: serve the simulator from the command line."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing

from .config import SimConfig
from .server import run_sim


def main(argv: list[str] | None = None) -> None:
    """Parse flags named after ``SimConfig`` fields (``--decode-tps 90``) and serve."""
    parser = argparse.ArgumentParser(prog="python -m dspark_sim", description="dspark vLLM simulator")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log-level", default="info")
    defaults = SimConfig()
    hints = typing.get_type_hints(SimConfig)
    for field in dataclasses.fields(SimConfig):
        default = getattr(defaults, field.name)
        flag = "--" + field.name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        else:
            parser.add_argument(flag, type=_value_type(hints[field.name]), default=default)
    args = vars(parser.parse_args(argv))
    host, port, log_level = args.pop("host"), args.pop("port"), args.pop("log_level")
    run_sim(SimConfig(**args), host=host, port=port, log_level=log_level)


def _value_type(hint: object) -> type:
    """The type a flag's value converts to: ``float`` for ``float | None`` (None stays the default)."""
    if isinstance(hint, types.UnionType):
        [inner] = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return inner  # type: ignore[no-any-return]
    assert isinstance(hint, type)
    return hint


if __name__ == "__main__":
    main()
