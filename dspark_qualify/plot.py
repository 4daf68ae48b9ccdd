"""``bench --plot FILE.png``: the distributions of TTFT, TPOT, ITL and E2EL with their p50/p90/p99.

matplotlib is optional (the ``plot`` extra) and imported only here, when a plot is drawn; the figure is
built with ``matplotlib.figure.Figure`` (no pyplot: no global state, no GUI backend).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path

from dspark_qualify.serving_metrics import METRICS, PERCENTILES

__all__ = ["INSTALL_HINT", "PlotUnavailableError", "plot_available", "write_plot"]

INSTALL_HINT = "--plot needs matplotlib: pip install 'dspark-gateway[plot]'"
_LINES = ("-", "--", ":")
#: What one value of each metric is: the histograms count requests, or chunks for ITL.
_UNIT = {"ttft": "requests", "tpot": "requests", "itl": "chunk gaps", "e2el": "requests"}


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def plot_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def write_plot(
    path: Path,
    values: Mapping[str, Sequence[float]],
    metrics: Mapping[str, object],
    title: str,
) -> None:
    """Draw one histogram (ms) per metric of ``values`` (s, as :func:`metric_values` gives them), with
    the ``p50/p90/p99_<metric>_ms`` lines of ``metrics``, and save it as a PNG at ``path``."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotUnavailableError(INSTALL_HINT) from exc
    figure = Figure(figsize=(12, 8), layout="constrained")
    for axes, (name, label) in zip(figure.subplots(2, 2).flat, METRICS.items(), strict=True):
        ms = [v * 1000 for v in values.get(name, ())]
        axes.set_title(f"{label} ({name.upper()})")
        axes.set_xlabel("ms")
        axes.set_ylabel(_UNIT[name])
        if not ms:
            axes.text(0.5, 0.5, "no data", ha="center", va="center", transform=axes.transAxes)
            continue
        axes.hist(ms, bins=min(50, max(5, len(ms) // 4)), color="tab:blue", alpha=0.6)
        for p, style in zip(PERCENTILES, _LINES, strict=True):
            at = metrics.get(f"p{p}_{name}_ms")
            if isinstance(at, float):
                axes.axvline(at, color="tab:red", linestyle=style, label=f"p{p} {at:.2f} ms")
        axes.legend()
    figure.suptitle(title)
    figure.savefig(path, format="png", dpi=100)
