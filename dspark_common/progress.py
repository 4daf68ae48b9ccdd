"""Progress of long work on the command line (``bench``, ``batches wait``): a bar on a terminal, a
line per step elsewhere — a bar written to a file or a pipe is drawn only once the work is done, so
a benchmark piped to a file would say nothing for minutes."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


def progress_for(console: Console) -> Progress | LineProgress:
    """A progress bar on a terminal; elsewhere (a file, a pipe, CI) a line per step."""
    if not console.is_terminal:
        return LineProgress(console)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console)


@dataclass(slots=True)
class _Task:
    description: str
    total: float | None
    completed: float = 0


class LineProgress:
    """What a progress bar shows, as one line per step (``counting run 2: 3/12, 41.5 s``), for output
    that is not a terminal: a bar there is drawn only once it is done."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._tasks: dict[TaskID, _Task] = {}
        self._started = time.monotonic()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, visible: bool = True) -> TaskID:
        task = TaskID(len(self._tasks))
        self._tasks[task] = _Task(description, total)
        return task

    def update(
        self,
        task: TaskID,
        advance: float = 0,
        description: str | None = None,
        total: float | None = None,
        completed: float | None = None,
    ) -> None:
        """As rich's ``Progress.update``: a line when the count moved or the description changed."""
        kept = self._tasks[task]
        before = (kept.description, kept.completed)
        kept.description = description or kept.description
        kept.total = total if total is not None else kept.total
        kept.completed = completed if completed is not None else kept.completed + advance
        if (kept.description, kept.completed) == before:
            return
        of = "?" if kept.total is None else f"{kept.total:g}"
        elapsed = time.monotonic() - self._started
        line = f"{kept.description}: {kept.completed:g}/{of}, {elapsed:.1f} s"
        self.console.print(line, highlight=False, markup=False)
