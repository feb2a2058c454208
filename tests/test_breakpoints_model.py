"""Armed breakpoints, pure parts: input checks, FILE:LINE, path matching, an owner's replacement, job scope."""

from __future__ import annotations

import pytest

from raydbg.breakpoints import model
from raydbg.breakpoints.model import BadBreakpoint, Breakpoint, checked


def bp(file: str = "/w/train.py", line: int = 3, **kw: object) -> Breakpoint:
    return checked({"file": file, "line": line, **kw}, owner=kw.get("owner"), job=kw.get("job"))


def test_checked_defaults_and_errors() -> None:
    b = bp()
    assert (b.hit_limit, b.owner, b.job, b.condition) == (3, "cli", None, None)
    assert b.id.startswith("bp-") and model.Breakpoint.from_dict(b.to_dict()) == b
    assert bp(condition="  ").condition is None
    for body, words in [
        ({"file": "", "line": 1}, "file"),
        ({"file": "a\nb.py", "line": 1}, "control"),
        ({"file": "a.py", "line": 0}, "line"),
        ({"file": "a.py", "line": True}, "line"),
        ({"file": "a.py", "line": "3"}, "line"),
        ({"file": "a.py", "line": 3, "condition": "x >"}, "not a Python expression"),
        ({"file": "a.py", "line": 3, "hit_limit": -1}, "hit_limit"),
        ({"file": "a.py", "line": 3, "hit_limit": 10**6}, "hit_limit"),
        ([], "JSON object"),
    ]:
        with pytest.raises(BadBreakpoint, match=words) as err:
            checked(body)
        assert "\n" not in str(err.value)
    with pytest.raises(BadBreakpoint, match="job"):
        checked({"file": "a.py", "line": 1}, job="../x")
    assert bp(hit_limit=0).hit_limit == 0  # count only


def test_parse_spec_and_cli_path() -> None:
    assert model.parse_spec("train.py:42") == ("train.py", 42)
    assert model.parse_spec("C:/x/a.py:7") == ("C:/x/a.py", 7)
    for bad in ("train.py", "train.py:", ":3", "a.py:x", "a.py:0"):
        with pytest.raises(BadBreakpoint, match="FILE:LINE"):
            model.parse_spec(bad)
    assert model.cli_path("/a/./b.py", "/cwd") == "/a/b.py"
    assert model.cli_path("pkg/./b.py", "/cwd") == "pkg/b.py"
    assert model.cli_path("../b.py", "/cwd/sub") == "/cwd/b.py"


def test_matches() -> None:
    assert model.matches("/w/train.py", ("/w/train.py",))
    assert model.matches("/w/x/../train.py", ("/w/train.py",))
    assert not model.matches("/w/train.py", ("/v/w/train.py",))
    assert model.matches("train.py", ("/tmp/ray/pkg_1/train.py",))
    assert model.matches("pkg/train.py", ("/tmp/ray/x/pkg/train.py",))
    assert model.matches("train.py", ("train.py",))
    assert not model.matches("train.py", ("/tmp/mytrain.py",))
    assert not model.matches("pkg/train.py", ("/tmp/otherpkg/train.py",))
    # A relative path is the user's code, not an installed package's file of that name ...
    assert not model.matches("train.py", ("/venv/lib/python3.12/site-packages/ray/train/train.py",))
    assert not model.matches("train.py", ("/usr/lib/python3/dist-packages/x/train.py",))
    # ... unless it names the packages directory itself.
    assert model.matches("site-packages/ray/train/train.py",
                         ("/venv/lib/python3.12/site-packages/ray/train/train.py",))


def test_job_scope() -> None:
    every, a, b = bp(), bp(job="0100"), bp(job="0200")
    assert model.for_worker([every, a, b], "0100") == [every, a]
    assert [x for x in (every, a, b) if model.in_scope(x, "0200")] == [every, b]
    assert [x for x in (every, a, b) if model.in_scope(x, None)] == [every, a, b]


def test_replacement_keeps_unchanged_ids() -> None:
    old1, old2 = bp(line=1, owner="vscode"), bp(line=2, owner="vscode")
    new1, new3, dup3 = bp(line=1, owner="vscode"), bp(line=3, owner="vscode"), bp(line=3, owner="vscode")
    keep, gone = model.replacement([old1, old2], [new1, new3, dup3])
    assert keep == [old1, new3]  # line 1 keeps its id (and its hits); the duplicate of 3 is dropped
    assert gone == [old2]
    changed = bp(line=1, owner="vscode", condition="x > 1")
    keep, gone = model.replacement([old1], [changed])
    assert keep == [changed] and gone == [old1]


def test_counts_shown_by_the_api() -> None:
    records = [
        {"id": "bp-1", "hits": 3, "error": None, "ts": 1.0},
        {"id": "bp-1", "hits": 4, "error": "condition 'x' raised NameError", "ts": 2.0},
        {"id": "bp-1", "hits": 1, "error": "older", "ts": 1.5},
        {"id": "bp-2", "hits": True, "ts": 1.0},  # malformed: skipped
        {"id": "bp-2", "hits": -5, "ts": 1.0},
        {"hits": 9},
    ]
    assert model.sum_hits(records) == {"bp-1": (8, "condition 'x' raised NameError")}
    sessions = [{"breakpoint_id": "bp-1"}, {"breakpoint_id": None}, {}, {"breakpoint_id": "bp-1"}]
    assert model.paused_counts(sessions) == {"bp-1": 2}
