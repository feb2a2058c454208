"""A run's goodput report from the embedded telemetry files: what `raydbg goodput` prints, for an app's end-of-run summary."""

from __future__ import annotations

from raydbg.telemetry import goodput, reader


def goodput_report(
    run: str = "latest", dirs: list[str] | None = None, rank: int = 0, png: str | None = None
) -> tuple[goodput.Report, str | None]:
    """The goodput report of a run from the embedded files (and its PNG when `png` is a
    path; `{run}` in it becomes the run id): what `raydbg goodput` prints, for an app's end-of-run summary. ValueError
    with a one-line reason when there is nothing to report."""
    spans = reader.spans(dirs) if dirs is None or dirs else []
    if run == "latest":
        ids = goodput.run_ids(spans)
        if not ids:
            raise ValueError("no training run spans (attribute train.run.id) found; pass --dir DIR")
        run = ids[-1]
    chosen = goodput.select(spans, run, rank)
    if not chosen:
        known = ", ".join(goodput.run_ids(spans)[-5:]) or "none"
        raise ValueError(f"no spans for run {run!r} (recent runs: {known}); pass --dir DIR")
    report = goodput.compute(chosen, run)
    if png:
        from raydbg.telemetry.timeline import render

        png = render(report, png.replace("{run}", run))
    return report, png
