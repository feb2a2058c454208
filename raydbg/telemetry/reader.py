"""Reads the embedded JSON-lines files back: finds them, parses spans, filters, summarises.

No Ray connection: the files are found through `--dir`, `RAYDBG_TELEMETRY_DIR`, our
folder of the latest local Ray session (`<ray tmp>/session_latest` names it) and the
temp-dir fallback. Only regular files of ours are read (private_dir.open_own_file).
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import statistics
from collections.abc import Iterable, Iterator
from typing import Any

from raydbg import private_dir
from raydbg.telemetry import output_dir


def default_dirs() -> list[str]:
    """Telemetry directories to read when none is named, most specific first."""
    dirs: list[str] = []
    if os.environ.get("RAYDBG_TELEMETRY_DIR"):
        dirs.append(os.environ["RAYDBG_TELEMETRY_DIR"])
    ray_tmp = os.environ.get("RAY_TMPDIR") or os.path.join(private_dir.temp_base(), "ray")
    try:  # only the session's name comes from Ray's shared folder
        latest = os.readlink(os.path.join(ray_tmp, "session_latest"))
        dirs.append(str(private_dir.session_path(latest, "telemetry")))
    except (OSError, ValueError):
        pass
    dirs.append(output_dir.fallback_dir())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def _age(path: str) -> tuple[str, int]:
    # x.jsonl.2 is older than x.jsonl.1, which is older than x.jsonl.
    base, _, n = path.partition(".jsonl")
    return base, -int(n[1:]) if n[1:].isdigit() else 0


def files(dirs: Iterable[str]) -> list[str]:
    """Every JSON-lines file (rotated ones too) in `dirs`, oldest rotation first."""
    out: list[str] = []
    for d in dirs:
        found = glob.glob(os.path.join(d, "*.jsonl")) + glob.glob(os.path.join(d, "*.jsonl.*"))
        out.extend(sorted((p for p in found if not p.endswith(".tmp")), key=_age))
    return out


def records(paths: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Span and metric records, each with the `resource` of the file that holds it."""
    for path in paths:
        resource: dict[str, Any] = {}
        try:
            fh = open(private_dir.open_own_file(path), encoding="utf-8")
        except OSError:
            continue
        with fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash or a concurrent write
                if rec.get("type") == "resource":
                    resource = rec.get("attributes", {})
                    continue
                rec["resource"] = resource
                yield rec


def spans(
    dirs: Iterable[str] | None = None,
    name: str | None = None,
    job: str | None = None,
    trace: str | None = None,
) -> list[dict[str, Any]]:
    """Spans sorted by end time; `name` is a glob or substring, `job` a Ray job id (prefix)."""
    out = []
    for rec in records(files(default_dirs() if dirs is None else dirs)):
        if rec.get("type") != "span":
            continue
        if name and not (fnmatch.fnmatchcase(rec["name"], name) or name in rec["name"]):
            continue
        if job:
            rec_job = rec["attributes"].get("ray.job_id") or rec["resource"].get("ray.job_id")
            if not str(rec_job or "").startswith(job):
                continue
        if trace and not str(rec.get("trace_id", "")).startswith(trace):
            continue
        out.append(rec)
    out.sort(key=lambda r: r["end"])
    return out


def process_label(rec: dict[str, Any]) -> str:
    res = rec.get("resource", {})
    return f"{res.get('raydbg.process', '?')}-{res.get('process.pid', '?')}"


def summarize(span_list: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per span name: count, total, mean, p50, p95, max duration (seconds), slowest first."""
    by_name: dict[str, list[float]] = {}
    for s in span_list:
        by_name.setdefault(s["name"], []).append(float(s["duration"]))
    rows: list[dict[str, Any]] = []
    for name, ds in by_name.items():
        ds.sort()
        rows.append(
            {
                "name": name,
                "count": len(ds),
                "total": sum(ds),
                "mean": statistics.fmean(ds),
                "p50": ds[len(ds) // 2],
                "p95": ds[min(len(ds) - 1, int(len(ds) * 0.95))],
                "max": ds[-1],
            }
        )
    rows.sort(key=lambda r: -float(r["total"]))
    return rows
