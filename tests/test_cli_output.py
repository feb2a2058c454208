"""`raydbg list` layout (pipe and narrow terminal), session id prefixes, `--version`, the Ray range check."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from raydbg import compat, table_layout
from raydbg.commands.list_sessions import LIST_COLUMNS, LIST_DROP_ORDER, _list_row
from raydbg.session_ids import IdError, resolve

LONG_ID = "c8d74f0a9e1b"


def _rec(**over: Any) -> dict[str, Any]:
    rec = {
        "id": LONG_ID, "job_id": "02000000", "task_name": "preprocess_" + "shard" * 12,
        "node_ip": "10.11.12.13", "pid": 123456, "file": "/very/long/path/" + "d" * 40 + "/udf.py",
        "line": 1234, "function": "transform_batch_" + "x" * 30, "reason": "exception",
        "exception": {"type": "ValueError", "message": "bad pixel " * 20},
        "since": 0.0, "state": "paused",
    }
    rec.update(over)
    return rec


def _rows(*recs: dict[str, Any]) -> list[tuple[str, ...]]:
    return [_list_row(r, 100.0) for r in recs]


def test_pipe_prints_every_value_whole() -> None:
    rows = _rows(_rec(), _rec(id="a" * 12, task_name="short"))
    lines = table_layout.render(LIST_COLUMNS, rows, None, LIST_DROP_ORDER, ("id",))
    assert lines[0].split() == list(LIST_COLUMNS)
    for row, line in zip(rows, lines[1:], strict=True):
        for value in row:
            assert " ".join(value.split()) in line  # whole, on one line
    assert "…" not in "".join(lines)


def test_narrow_terminal_drops_columns_before_cutting_and_never_the_id() -> None:
    rows = _rows(_rec(task_name="prep", file="/a/udf.py", function="f", exception={"type": "E", "message": "m"}))
    natural = max(len(x) for x in table_layout.render(LIST_COLUMNS, rows, None))
    lines = table_layout.render(LIST_COLUMNS, rows, natural - 1, LIST_DROP_ORDER, ("id",))
    header = lines[0].split()
    assert header == [c for c in LIST_COLUMNS if c != "function"]  # the least useful went first
    assert all(len(x) <= natural - 1 for x in lines) and "…" not in "".join(lines)
    lines = table_layout.render(LIST_COLUMNS, rows, 40, LIST_DROP_ORDER, ("id",))
    assert lines[1].startswith(LONG_ID) and all(len(x) <= 40 for x in lines)
    assert lines[0].split()[0] == "id" and "…" not in "".join(lines)


def test_80_columns_cut_only_after_dropping_and_keep_the_id_whole() -> None:
    rows = _rows(_rec())
    for width in (80, 30, 12):
        lines = table_layout.render(LIST_COLUMNS, rows, width, LIST_DROP_ORDER, ("id",))
        assert LONG_ID in lines[1]
        if width >= 30:
            assert all(table_layout.cell_width(x) <= width for x in lines)
    lines = table_layout.render(LIST_COLUMNS, rows, 80, LIST_DROP_ORDER, ("id",))
    header = lines[0].split()
    # Drops go in order: a kept column means every column after it in the order is kept too.
    dropped = [c for c in LIST_DROP_ORDER if c not in header]
    assert dropped == list(LIST_DROP_ORDER) and header == ["id", "what", "where"]
    assert "…" in lines[1]  # only now, with every droppable column gone, a value is cut


def test_cut_respects_wide_characters() -> None:
    lines = table_layout.render(("id", "what"), [("abc", "训练" * 20)], 20, (), ("id",))
    assert all(table_layout.cell_width(x) <= 20 for x in lines) and lines[1].endswith("…")


def test_prefix_resolution() -> None:
    ids = ["c8d74f0a9e1b", "c8e01b22aa00", "0f0f0f0f0f0f"]
    assert resolve("c8d", ids) == "c8d74f0a9e1b"
    assert resolve("0", ids) == "0f0f0f0f0f0f"
    assert resolve("c8e01b22aa00", ids) == "c8e01b22aa00"
    with pytest.raises(IdError, match="ambiguous") as err:
        resolve("c8", ids)
    assert "\n" not in str(err.value) and "c8d74f0a9e1b" in str(err.value)
    with pytest.raises(IdError, match="no paused session matches"):
        resolve("zz", ids)
    with pytest.raises(IdError, match="empty"):
        resolve(" ", ids)


def test_version_prints_raydbg_ray_debugpy_and_python() -> None:
    """Without a cluster (RAY_ADDRESS at nothing): one line, no agents' block, no error."""
    import platform

    env = {k: v for k, v in os.environ.items() if k not in ("RAYDBG_GATEWAY",)}
    env["RAY_ADDRESS"] = "127.0.0.1:1"
    out = subprocess.run([sys.executable, "-m", "raydbg", "--version"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    from importlib import metadata

    assert out.stdout == (f"raydbg {metadata.version('raydbg')}, ray {metadata.version('ray')}, "
                          f"debugpy {metadata.version('debugpy')}, python {platform.python_version()}\n")


def test_supported_range() -> None:
    assert compat.supported("2.60.0") and compat.supported("2.60.0rc1")
    assert compat.supported("2.51.0") and compat.supported("2.55.1") and compat.supported("2.60.3")
    assert not compat.supported("2.50.1") and not compat.supported("2.61.0")
    assert not compat.supported("2.61.0rc1") and not compat.supported("2.61.0.dev0")
    assert not compat.supported("") and not compat.supported("3.0.0") and not compat.supported("1.60.0")
    assert compat.range_text() == ">=2.51.0,<2.61"
    assert compat.problem(compat.SUPPORTED_RAY[0]) is None


@pytest.fixture
def other_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process reads Ray's version as 2.50.1 (the check's only input)."""
    monkeypatch.setattr(compat, "ray_version", lambda: "2.50.1")
    monkeypatch.setattr(compat, "_warned", [])
    monkeypatch.setenv("RAY_DEBUG", "1")
    monkeypatch.delenv("RAYDBG_DISABLE", raising=False)
    monkeypatch.setattr(sys, "breakpointhook", sys.__breakpointhook__)


def test_outside_the_range_one_line_and_breakpoint_stays_builtin(
    other_ray: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from raydbg import activation

    env = {"env_vars": {"A": "1"}}
    assert activation.runtime_env_hook(env) == env  # the job gets no raydbg hook
    activation.worker_setup_hook()  # a worker: nothing installed, no exception
    activation.worker_setup_hook()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "found Ray 2.50.1" in err and "ray>=2.51.0,<2.61" in err
    assert sys.breakpointhook is sys.__breakpointhook__
    # The built-in hook honours PYTHONBREAKPOINT, which Ray points at its own debugger.
    called: list[int] = []
    monkeypatch.setenv("PYTHONBREAKPOINT", f"{__name__}._record_breakpoint")
    globals()["_calls"] = called
    breakpoint()
    assert called == [1]


def _record_breakpoint() -> None:
    globals()["_calls"].append(1)


def test_up_refuses_an_unsupported_ray_in_one_line(other_ray: None) -> None:
    out = subprocess.run(
        [sys.executable, "-c",
         "import sys; from raydbg import compat; compat.ray_version = lambda: '2.61.0'; "
         "from raydbg.cli import main; sys.exit(main(['up']))"],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "found Ray 2.61.0" in out.stderr and "Traceback" not in out.stderr
