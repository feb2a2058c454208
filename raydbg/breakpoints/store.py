"""Armed breakpoints in the registry: records, the version key workers poll, hit counters, pause slots.

Keys (GCS KV, namespace "raydbg"):
  breakpoint/<id>                      the Breakpoint (model.Breakpoint.to_dict)
  breakpoint-version                   changes on every add, remove or replace: workers poll only this
  breakpoint-hits/<id>/<node>-<pid>    one worker's hits (and its last condition error)
  breakpoint-slot/<id>/<k>/<gen>       k < hit_limit: the highest generation is slot k's holder (a lease)
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
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
        for key in registry.keys(f"{prefix}{bp_id}/"):
            registry.delete(key)


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
# GCS KV has put-if-absent but no compare-and-swap, so a slot never changes hands by an
# overwrite. Slot k of a breakpoint is a series of generations, `breakpoint-slot/<id>/<k>/<g>`;
# the highest one present says who holds it. A claimer takes generation g+1 with put-if-absent
# (of two claimers, exactly one wins it), then checks that no later generation appeared meanwhile
# (a claimer whose listing went stale yields), then deletes the generations below its own. A holder
# writes only its own generation's key; releasing leaves it in place, marked free, so generations
# never repeat. Renew and release act only while that key is still the highest and holds the
# holder's token: at worst a write that races a takeover (possible only after the holder failed to
# renew for LEASE_S) rewrites a superseded generation, which nobody reads as the holder.
@dataclass(frozen=True)
class Slot:
    """A pause slot a worker holds: its generation's key and a token only the holder knows."""

    bp_id: str
    index: int
    gen: int
    who: str
    token: str

    @property
    def key(self) -> str:
        return f"{SLOT}{self.bp_id}/{self.index}/{self.gen}"


def _record(slot: Slot, free: bool = False) -> bytes:
    rec: dict[str, Any] = {"who": slot.who, "token": slot.token, "ts": time.time()}
    if free:
        rec["free"] = True
    return json.dumps(rec).encode()


def _parse(raw: bytes | None) -> dict[str, Any] | None:
    try:
        rec = json.loads(raw) if raw else None
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def held(raw: bytes | None, now: float) -> bool:
    """Is a slot's top generation held (its holder renewed it within LEASE_S and did not free it)?"""
    rec = _parse(raw)
    if rec is None or rec.get("free"):
        return False
    try:
        return now - float(rec["ts"]) <= LEASE_S
    except (KeyError, TypeError, ValueError):
        return False  # unreadable: treated as free, never as a pause that blocks for ever


def _generations(bp_id: str) -> dict[int, dict[int, str]]:
    """Per slot index: generation -> key, from one listing."""
    prefix = f"{SLOT}{bp_id}/"
    out: dict[int, dict[int, str]] = {}
    for key in registry.keys(prefix):
        index, _, gen = key[len(prefix):].partition("/")
        if index.isdigit() and gen.isdigit():
            out.setdefault(int(index), {})[int(gen)] = key
    return out


def claim_slot(bp_id: str, limit: int, who: str) -> Slot | None:
    """A free slot, now ours; None when all are held."""
    token = secrets.token_hex(8)
    gens = _generations(bp_id)
    tops = {k: (max(g), g[max(g)]) for k, g in gens.items() if g}
    values = registry.multi_get([key for _, key in tops.values()])
    now = time.time()
    for k in range(limit):
        top, key = tops.get(k, (-1, ""))
        if top >= 0 and held(values.get(key), now):
            continue
        slot = Slot(bp_id, k, top + 1, who, token)
        mine = _record(slot)
        if registry.put_if_absent(slot.key, mine) != mine:
            continue  # another worker took this generation first
        after = _generations(bp_id).get(k, {})
        if max(after, default=slot.gen) != slot.gen:  # our listing was stale: a later one holds it
            registry.delete(slot.key)
            continue
        for gen, old in after.items():
            if gen < slot.gen:
                registry.delete(old)  # the previous holder's (freed, or its lease ran out)
        return slot
    return None


def owns(slot: Slot) -> bool:
    """Is `slot` still the holder's: its generation the highest, with the holder's token?"""
    if max(_generations(slot.bp_id).get(slot.index, {}), default=None) != slot.gen:
        return False
    rec = _parse(registry.get_bytes(slot.key))
    return rec is not None and rec.get("token") == slot.token and not rec.get("free")


def renew_slot(slot: Slot) -> bool:
    """Extend the lease; False when the slot is no longer ours (taken over, or the breakpoint removed)."""
    if not owns(slot):
        return False
    registry.put(slot.key, _record(slot))
    return True


def release_slot(slot: Slot) -> None:
    """Free the slot if it is still ours (marked free, not deleted: generations never repeat;
    deleted when the breakpoint is gone: a worker that paused before it learned of the removal)."""
    if not owns(slot):
        return
    if registry.get_bytes(BREAKPOINT + slot.bp_id) is None:
        registry.delete(slot.key)
    else:
        registry.put(slot.key, _record(slot, free=True))
