"""Terminal output: rich progress bars and the one-line summary every command ends with."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(stderr=True)


@contextlib.contextmanager
def progress(enabled: bool = True) -> Iterator[Progress]:
    """A rich progress display (disabled: a silent one, for tests and --quiet)."""
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    )
    with bar:
        yield bar


def summary(text: str) -> None:
    """The last line of a command: what was done and where the results are (stdout)."""
    print(text, flush=True)
