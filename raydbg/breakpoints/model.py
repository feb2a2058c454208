"""Breakpoint records and their rules (pure): input checks, path matching, an owner's replacement set."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raydbg.api_errors import BadRequest

DEFAULT_HIT_LIMIT = 3  # threads paused at once per breakpoint, cluster-wide
MAX_HIT_LIMIT = 10_000
MAX_FILE = 4096
MAX_CONDITION = 2000
DEFAULT_OWNER = "cli"

_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BadBreakpoint(BadRequest):
    """Input a user can fix; the message is one line (a route that raises it answers 400)."""


def new_id() -> str:
    return "bp-" + secrets.token_hex(4)


@dataclass
class Breakpoint:
    """What the registry stores; the API adds hits, paused and error (see public())."""

    id: str
    file: str
    line: int
    job: str | None = None  # a Ray job id (hex, as `raydbg list` shows); None: every job
    condition: str | None = None  # a Python expression, evaluated in the paused frame
    hit_limit: int = DEFAULT_HIT_LIMIT
    owner: str = DEFAULT_OWNER
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Breakpoint:
        """A stored record, checked again (the registry is writable by anything with GCS access)."""
        bp = checked(data, owner=data.get("owner"), job=data.get("job"))
        if not isinstance(data.get("id"), str) or not _ID.fullmatch(data["id"]):
            raise BadBreakpoint("a breakpoint record without a valid id")
        bp.id = data["id"]
        created = data.get("created")
        if isinstance(created, (int, float)) and not isinstance(created, bool):
            bp.created = float(created)
        return bp

    def same_spec(self, other: Breakpoint) -> bool:
        return (self.file, self.line, self.condition, self.hit_limit) == (
            other.file, other.line, other.condition, other.hit_limit)


def public(bp: Breakpoint, hits: int = 0, paused: int = 0, error: str | None = None) -> dict[str, Any]:
    return {**bp.to_dict(), "hits": hits, "paused": paused, "error": error}


def ident(value: Any, what: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise BadBreakpoint(f"{what} must be an id of letters, digits, '_', '.', '-' (got {str(value)[:40]!r})")
    return value


def checked(body: Any, owner: Any = None, job: Any = None) -> Breakpoint:
    """A Breakpoint from API input {"file", "line", "condition"?, "hit_limit"?}, or BadBreakpoint."""
    if not isinstance(body, dict):
        raise BadBreakpoint("a breakpoint must be a JSON object with file and line")
    path = body.get("file")
    if not isinstance(path, str) or not path.strip():
        raise BadBreakpoint("file must be a non-empty path")
    if len(path) > MAX_FILE or _CONTROL.search(path):
        raise BadBreakpoint("file must be a path without control characters, at most 4096 characters")
    line = body.get("line")
    if isinstance(line, bool) or not isinstance(line, int) or not 1 <= line <= 10_000_000:
        raise BadBreakpoint("line must be a positive integer")
    condition = body.get("condition")
    if condition is not None:
        if not isinstance(condition, str) or len(condition) > MAX_CONDITION:
            raise BadBreakpoint(f"condition must be a Python expression of at most {MAX_CONDITION} characters")
        condition = condition.strip() or None
    if condition is not None:
        try:
            compile(condition, "<breakpoint condition>", "eval")  # parsed only, never run here
        except (SyntaxError, ValueError) as exc:
            raise BadBreakpoint(f"condition {condition[:60]!r} is not a Python expression: "
                                f"{getattr(exc, 'msg', exc)}") from None
    hit_limit = body.get("hit_limit")
    if hit_limit is None:
        hit_limit = DEFAULT_HIT_LIMIT
    if isinstance(hit_limit, bool) or not isinstance(hit_limit, int) or not 0 <= hit_limit <= MAX_HIT_LIMIT:
        raise BadBreakpoint(f"hit_limit must be an integer from 0 (count only) to {MAX_HIT_LIMIT}")
    return Breakpoint(
        id=new_id(), file=path, line=line, job=ident(job, "job"), condition=condition,
        hit_limit=hit_limit, owner=ident(owner, "owner") or DEFAULT_OWNER,
    )


def parse_spec(spec: str) -> tuple[str, int]:
    """`FILE:LINE` as typed on the command line."""
    path, sep, line = spec.rpartition(":")
    if not sep or not path or not line.isdigit() or int(line) < 1:
        raise BadBreakpoint(f"expected FILE:LINE (e.g. train.py:42), got {spec!r}")
    return path, int(line)


def cli_path(path: str, cwd: str) -> str:
    """How the CLI stores a path: absolute stays; `a/b.py` stays relative (matched as a suffix); `..` is resolved."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    norm = os.path.normpath(path)
    if norm.startswith(".."):
        return os.path.normpath(os.path.join(cwd, norm))
    return norm


def in_scope(bp: Breakpoint, job: str | None) -> bool:
    """GET ?job=J: that job's breakpoints and those for every job."""
    return job is None or bp.job is None or bp.job == job


def for_worker(bps: Iterable[Breakpoint], job_id: str) -> list[Breakpoint]:
    """The breakpoints a worker of `job_id` arms."""
    return [bp for bp in bps if bp.job is None or bp.job == job_id]


def replacement(current: list[Breakpoint], wanted: list[Breakpoint]) -> tuple[list[Breakpoint], list[Breakpoint]]:
    """PUT for one (owner, job): (to keep or add, to remove). Unchanged ones keep their id and counts."""
    left = list(current)
    out: list[Breakpoint] = []
    for bp in wanted:
        same = next((c for c in left if c.same_spec(bp)), None)
        if same is not None:
            left.remove(same)
            out.append(same)
        elif not any(o.same_spec(bp) for o in out):
            out.append(bp)
    return out, left


# What arming costs a hot loop in a Python 3.11 worker (the settrace fallback), measured by
# benchmarks/armed_breakpoints.py (docs/breakpoints.md): said by `break add` and the worker.
PY311_COST = "3-27x"


# --- matching a code object's file ---------------------------------------------------
def matches(bp_file: str, filenames: tuple[str, ...]) -> bool:
    """Does a breakpoint's `file` name one of a code object's paths (co_filename, its realpath)?

    An absolute path must be equal (after normalising); a relative one matches as a whole
    trailing part of the path (`pkg/train.py` matches `/tmp/ray/.../pkg/train.py`), for
    code that Ray unpacked from a working_dir, but not an installed package's file (an
    editor's `train.py` is the user's, not `site-packages/ray/train/.../train.py`) unless
    the relative path itself names the packages directory.
    """
    if os.path.isabs(bp_file):
        want = os.path.normpath(bp_file)
        return any(os.path.normpath(f) == want for f in filenames)
    rel = os.path.normpath(bp_file)
    tail = "/" + rel
    names_packages = any(d in tail for d in _PACKAGE_DIRS)
    return any(
        f == rel or (f.endswith(tail) and (names_packages or not any(d in f for d in _PACKAGE_DIRS)))
        for f in filenames
    )


_PACKAGE_DIRS = ("/site-packages/", "/dist-packages/")


# --- counts the API shows -------------------------------------------------------------
def sum_hits(records: Iterable[dict[str, Any]]) -> dict[str, tuple[int, str | None]]:
    """Workers' hit records -> per breakpoint: total hits and the newest error (bad records skipped)."""
    out: dict[str, tuple[int, str | None, float]] = {}
    for rec in records:
        bp_id, hits, error, ts = rec.get("id"), rec.get("hits"), rec.get("error"), rec.get("ts", 0.0)
        if (not isinstance(bp_id, str) or isinstance(hits, bool) or not isinstance(hits, int)
                or hits < 0 or isinstance(ts, bool) or not isinstance(ts, (int, float))):
            continue
        total, last, last_ts = out.get(bp_id, (0, None, float("-inf")))
        if isinstance(error, str) and ts >= last_ts:
            last, last_ts = error[:300], float(ts)
        out[bp_id] = (total + hits, last, last_ts)
    return {k: (v[0], v[1]) for k, v in out.items()}


def paused_counts(sessions: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Listed sessions per breakpoint id (a session record's `breakpoint_id`)."""
    counts: dict[str, int] = {}
    for rec in sessions:
        bp_id = rec.get("breakpoint_id")
        if isinstance(bp_id, str):
            counts[bp_id] = counts.get(bp_id, 0) + 1
    return counts
