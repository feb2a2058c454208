"""Armed breakpoints in the registry: records, the version key workers poll, hit counters, pause slots.

Keys (GCS KV, namespace "raydbg"):
  breakpoint/<id>                      the Breakpoint (model.Breakpoint.to_dict)
  breakpoint-version                   changes on every add, remove or replace: workers poll only this
  breakpoint-hits/<id>/<node>-<pid>    one worker's hits (and its last condition error)
  breakpoint-slot/<id>/<k>             k < hit_limit: a thread paused there holds it (a lease)
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import Any

from raydbg import registry
from raydbg.breakpoints.model import BadBreakpoint, Breakpoint, paused_counts, public, sum_hits

log = logging.getLogger("raydbg.breakpoints")

BREAKPOINT = "breakpoint/"
VERSION = "breakpoint-version"
HITS = "breakpoint-hits/"
SLOT = "breakpoint-slot/"
LEASE_S = 10.0  # a slot not renewed for this long belongs to a worker that died


def version() -> bytes | None:
    return registry.get_bytes(VERSION)


def bump() -> None:
    registry.put(VERSION, secrets.token_hex(8).encode())


def load() -> list[Breakpoint]:
    """Every valid stored breakpoint, oldest first (a malformed record is skipped and logged)."""
    out = []
    for raw in registry.list_prefix(BREAKPOINT):
        try:
            out.append(Breakpoint.from_dict(raw))
        except BadBreakpoint as exc:
            log.warning("raydbg: skipped a malformed breakpoint record: %s", exc)
    out.sort(key=lambda bp: (bp.created, bp.id))
    return out


def add(bp: Breakpoint) -> Breakpoint:
    registry.put(BREAKPOINT + bp.id, bp.to_dict())
    bump()
    return bp


def _forget(bp_id: str) -> None:
    registry.delete(BREAKPOINT + bp_id)
    for prefix in (HITS, SLOT):
        for key in registry._keys(f"{prefix}{bp_id}/"):
            registry.delete(key.decode())


def remove(bp_id: str) -> bool:
    if registry.get_bytes(BREAKPOINT + bp_id) is None:
        return False
    _forget(bp_id)
    bump()
    return True


def replace(owner: str, job: str | None, wanted: list[Breakpoint]) -> list[Breakpoint]:
    """All breakpoints of (owner, job) become `wanted`; unchanged ones keep their id and hits."""
    from raydbg.breakpoints.model import replacement

    current = [bp for bp in load() if bp.owner == owner and bp.job == job]
    keep, gone = replacement(current, wanted)
    known = {bp.id for bp in current}
    for bp in keep:
        if bp.id not in known:
            registry.put(BREAKPOINT + bp.id, bp.to_dict())
    for bp in gone:
        _forget(bp.id)
    if gone or len(keep) != len(current):
        bump()
    return keep


# --- counters -------------------------------------------------------------------------
def put_hits(bp_id: str, worker: str, hits: int, error: str | None) -> None:
    registry.put(f"{HITS}{bp_id}/{worker}", {"id": bp_id, "hits": hits, "error": error, "ts": time.time()})


def hit_stats() -> dict[str, tuple[int, str | None]]:
    """Per breakpoint: hits summed over workers, and the newest condition error."""
    return sum_hits(registry.list_prefix(HITS))


def listing(bps: list[Breakpoint]) -> list[dict[str, Any]]:
    """The API's view: each Breakpoint with hits, paused and error."""
    stats = hit_stats()
    paused = paused_counts(registry.sessions())
    return [public(bp, stats.get(bp.id, (0, None))[0], paused.get(bp.id, 0), stats.get(bp.id, (0, None))[1])
            for bp in bps]


# --- pause slots: at most hit_limit threads paused at once per breakpoint, cluster-wide ---------
def claim_slot(bp_id: str, limit: int, who: str) -> str | None:
    """A free slot's key, now ours (put-if-absent is atomic in GCS); None when all are held."""
    mine = json.dumps({"who": who, "token": secrets.token_hex(6), "ts": time.time()}).encode()
    for k in range(limit):
        key = f"{SLOT}{bp_id}/{k}"
        held = registry.put_if_absent(key, mine)
        if held == mine:
            return key
        if _expired(held):
            registry.delete(key)  # its holder stopped renewing: the worker is gone
            if registry.put_if_absent(key, mine) == mine:
                return key
    return None


def _expired(raw: bytes) -> bool:
    try:
        ts = float(json.loads(raw)["ts"])
    except (ValueError, KeyError, TypeError):
        return True
    return time.time() - ts > LEASE_S


def renew_slot(key: str, who: str) -> None:
    registry.put(key, json.dumps({"who": who, "token": secrets.token_hex(6), "ts": time.time()}).encode())


def release_slot(key: str) -> None:
    registry.delete(key)
