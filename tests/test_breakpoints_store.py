"""Pause slots (store.py) over an in-memory KV with GCS's semantics: claim, hit limit, release,
a lease that runs out, and a holder that lost its slot and must not touch the new holder's.

The interleavings (a takeover between two calls of another worker, a claimer whose listing
went stale) cannot be forced on a real GCS; tests/e2e/test_armed_breakpoints.py runs the lease
on one.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator

import pytest
from doubles import FakeGcs

from raydbg import registry
from raydbg.breakpoints import model, store
from raydbg.breakpoints.store import Slot
from raydbg.breakpoints.worker import Worker


class Kv(FakeGcs):
    """The registry's KV over a dict, with a hook that runs once before the next put-if-absent."""

    def __init__(self) -> None:
        super().__init__()
        self.before_add: Callable[[bytes], None] | None = None

    def internal_kv_put(self, k: bytes, v: bytes, overwrite: bool, ns: bytes, timeout: float = 0) -> int:
        if not overwrite and self.before_add is not None:
            hook, self.before_add = self.before_add, None
            hook(k)
        return super().internal_kv_put(k, v, overwrite, ns, timeout)

    def slot_keys(self) -> list[str]:
        return sorted(k.decode() for k in self.data if k.startswith(store.SLOT.encode()))

    def age(self, slot: Slot, seconds: float) -> None:
        """As if `slot`'s holder had not renewed for `seconds` (a dead or stalled worker)."""
        rec = json.loads(self.data[slot.key.encode()])
        rec["ts"] -= seconds
        self.data[slot.key.encode()] = json.dumps(rec).encode()


@pytest.fixture
def kv() -> Iterator[Kv]:
    fake = Kv()
    fake.data[f"{store.BREAKPOINT}bp-1".encode()] = b"{}"  # the breakpoint exists (its record)
    registry.use_client(fake)
    yield fake
    registry.use_client(None)


def claim(who: str, limit: int = 1) -> Slot | None:
    return store.claim_slot("bp-1", limit, who)


def test_limit_release_and_generations(kv: Kv) -> None:
    a, b = claim("a", 2), claim("b", 2)
    assert a and b and (a.index, b.index) == (0, 1) and claim("c", 2) is None
    store.release_slot(a)
    c = claim("c", 2)
    assert c and (c.index, c.gen) == (0, a.gen + 1)  # a freed slot is taken at the next generation
    assert kv.slot_keys() == [c.key, b.key]  # the freed generation is deleted by the one after it
    assert store.renew_slot(b) and store.renew_slot(c) and not store.renew_slot(a)
    store._forget("bp-1")
    assert kv.slot_keys() == [] and not store.renew_slot(c)  # breakpoint removed: no longer held
    late = claim("e")  # a worker that paused before it learned of the removal ...
    assert late and kv.slot_keys() == [late.key]
    store.release_slot(late)
    assert kv.slot_keys() == []  # ... leaves no slot key behind


def test_a_holder_whose_lease_ran_out_never_touches_the_new_holders_slot(kv: Kv) -> None:
    a = claim("a")
    assert a and claim("b") is None
    kv.age(a, store.LEASE_S - 1)
    assert claim("b") is None  # still within its lease
    kv.age(a, 2)  # a stopped renewing LEASE_S ago (died, or stalled)
    b = claim("b")
    assert b and b.gen == a.gen + 1 and kv.slot_keys() == [b.key]
    held = kv.data[b.key.encode()]
    worker = Worker("", "a", None)
    worker.slots = {a}
    worker.tick()  # a comes back: its renewal finds the slot lost and stops renewing it ...
    assert worker.slots == set()
    store.release_slot(a)  # ... and its release deletes nothing of b's
    assert kv.data[b.key.encode()] == held and kv.slot_keys() == [b.key]
    assert claim("c") is None and store.renew_slot(b)
    store.release_slot(b)
    assert claim("c") is not None


def test_two_claimers_of_an_expired_slot_one_wins(kv: Kv) -> None:
    a = claim("a")
    assert a
    kv.age(a, store.LEASE_S + 1)
    won: list[Slot | None] = []
    # b and c both read a's expired lease; c claims between b's read and b's write.
    kv.before_add = lambda key: won.append(claim("c"))
    b = claim("b")
    assert b is None and won[0] is not None and kv.slot_keys() == [won[0].key]


def test_a_claimer_whose_listing_went_stale_yields(kv: Kv) -> None:
    a = claim("a")
    assert a
    kv.age(a, store.LEASE_S + 1)
    later: list[Slot] = []

    def meanwhile(key: bytes) -> None:  # between b's read and b's write: two takeovers
        c = claim("c")
        assert c
        kv.age(c, store.LEASE_S + 1)
        d = claim("d")  # deletes c's generation: b's write of that generation now succeeds
        assert d
        later.append(d)

    kv.before_add = meanwhile
    assert claim("b") is None  # b sees the later generation after its write, and yields
    (d,) = later
    assert kv.slot_keys() == [d.key] and store.renew_slot(d)


def test_an_unreadable_slot_record_is_free() -> None:
    now = 1000.0
    assert store.held(json.dumps({"ts": now - 1}).encode(), now)
    assert not store.held(json.dumps({"ts": now - store.LEASE_S - 0.1}).encode(), now)
    assert not store.held(json.dumps({"ts": now, "free": True}).encode(), now)
    for raw in (b"{", b"[]", b'{"ts": "x"}', b"{}", None):
        assert not store.held(raw, now)


def test_malformed_breakpoint_records_are_skipped_and_logged(kv: Kv, caplog: pytest.LogCaptureFixture) -> None:
    good = store.add(model.checked({"file": "/w/a.py", "line": 3}))
    kv.data[f"{store.BREAKPOINT}bp-bad".encode()] = json.dumps({"id": "bp-bad", "file": "/w/a.py",
                                                                 "line": "three"}).encode()
    kv.data[f"{store.BREAKPOINT}bp-junk".encode()] = b"not json at all"
    with caplog.at_level(logging.WARNING, logger="raydbg.breakpoints"):
        assert [bp.id for bp in store.load()] == [good.id]
    skipped = [r for r in caplog.records if "skipped a malformed breakpoint record" in r.getMessage()]
    assert len(skipped) == 2, caplog.text  # bp-bad and the fixture's empty bp-1 (bp-junk is not JSON)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.11 only: 3.12+ workers always have sys.monitoring")
def test_a_311_worker_that_did_not_opt_in_says_so_in_the_listing(kv: Kv, monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg.breakpoints import worker

    monkeypatch.delenv(worker.PY311_ENV, raising=False)
    assert worker._layer() is None  # no layer without RAYDBG_BREAK_PY311=1
    bp = store.add(model.checked({"file": "/w/a.py", "line": 3}))
    w = Worker("01000000", "node-1", worker._layer())
    w.tick()
    hits, error = store.hit_stats()[bp.id]
    assert hits == 0 and error is not None and "not armed in a Python 3.11 worker" in error
    (row,) = [r for r in store.listing(store.load()) if r["id"] == bp.id]
    assert "RAYDBG_BREAK_PY311=1" in row["error"]


POLL_THREAD = """
import sys, threading
sys.path.insert(0, {repo!r})
from raydbg.breakpoints import worker
got = worker.start("01000000", "n" * 56)
print(got is None, "raydbg-breakpoints" in {{t.name for t in threading.enumerate()}}, flush=True)
"""


@pytest.mark.parametrize(("setting", "expect"), [("0", "True False"), ("1", "False True")])
def test_breakpoints_off_leaves_out_the_poll_thread(setting: str, expect: str) -> None:
    import os
    import subprocess
    from pathlib import Path

    code = POLL_THREAD.format(repo=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "RAYDBG_BREAKPOINTS": setting},
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == expect, out.stdout + out.stderr
