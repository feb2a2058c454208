"""Tests of the TUI's pure text helpers (sizes, bars, ages, rows, filter, truncation)."""

from __future__ import annotations

from tui_support import record

from raydbg.tui.format import (
    age,
    bar,
    event_row,
    gpus_cell,
    human_bytes,
    last_line,
    memory_cell,
    node_row,
    session_matches,
    session_row,
    truncate,
)
from raydbg.tui.gateway import Backoff


def test_human_bytes() -> None:
    assert human_bytes(512) == "512B"
    assert human_bytes(1536) == "1.5K"
    assert human_bytes(8 * 1024**3) == "8.0G"
    assert human_bytes(None) == "?"


def test_bar_colour_follows_pressure() -> None:
    low, high, full = bar(1, 10), bar(9, 10), bar(99, 100)
    assert low.plain == "█" + "░" * 9
    assert low.spans[0].style == "green"
    assert high.spans[0].style == "yellow"
    assert full.spans[0].style == "bold red" and full.plain == "█" * 10


def test_memory_and_gpu_cells() -> None:
    assert memory_cell({"used": 2 * 1024**3, "limit": 8 * 1024**3}).plain.endswith(" 2.0G/8.0G 25%")
    assert memory_cell(None).plain == "n/a"
    assert gpus_cell([{"index": 0, "used": 1024**3, "total": 80 * 1024**3}]) == "0:1.0G/80.0G"
    assert gpus_cell([]) == "-"


def test_node_row_states() -> None:
    head = {"node_id": "a", "node_ip": "10.0.0.1", "is_head": True, "alive": True, "agent": {}}
    assert node_row(head)[0] == "10.0.0.1 (head)"
    assert node_row(head)[-1] == "no agent"
    assert node_row({**head, "agent": {"port": 1}})[-1] == "up"
    assert node_row({**head, "alive": False})[-1] == "node dead"


def test_age_is_coarse() -> None:
    assert age(100, 112) == "12s"
    assert age(0, 4 * 60 + 59) == "4m"
    assert age(0, 2 * 3600 + 5 * 60) == "2h05m"
    assert age(10, 5) == "0s"


def test_session_row_and_filter() -> None:
    rec = record(
        "abc123def456",
        100.0,
        train_rank=3,
        reason="exception",
        exception={"type": "ValueError", "message": "bad shape"},
    )
    row = session_row(rec, 130.0)
    assert row[:4] == ("train_step_abc [rank 3]", "train.py:12", "30s", "waiting")
    assert row[6] == "ValueError: bad shape" and row[-1] == "abc123def456"
    assert session_matches(rec, "RANK 3") and session_matches(rec, "/app/train")
    assert session_matches(rec, "") and not session_matches(rec, "evaluate_model")


def test_event_row_truncates_message() -> None:
    row = event_row({"ts": 0, "kind": "memory.kill", "node_id": "x" * 40, "message": "m" * 500})
    assert row[1] == "memory.kill" and len(row[2]) == 12
    assert len(row[3]) == 200 and row[3].endswith("… (+308)")


def test_truncate_and_last_line() -> None:
    assert truncate("short", 10) == "short"
    cut = truncate("x" * 1000, 50)
    assert cut == "x" * 41 + "… (+959)"
    assert truncate("a\nb", 10) == "a⏎b"
    assert last_line("Traceback:\n  File x\nZeroDivisionError: division by zero\n") == (
        "ZeroDivisionError: division by zero"
    )


def test_backoff_doubles_to_cap_and_resets() -> None:
    b = Backoff(first=0.5, cap=3)
    assert [b.next_delay() for _ in range(5)] == [0.5, 1, 2, 3, 3]
    b.reset()
    assert b.next_delay() == 0.5
