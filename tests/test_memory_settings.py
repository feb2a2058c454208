"""Memory settings: one on/off parser, read once, and marks that honour min-free (no Ray)."""

from __future__ import annotations

import pytest

from raydbg.memory import settings
from raydbg.memory.monitor import MonitorConfig
from raydbg.memory.settings import Settings, switch

GiB = 1 << 30


@pytest.mark.parametrize("raw", ["0", "off", "OFF", " false ", "no"])
def test_every_switch_takes_the_same_off_words(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    for name in ("RAYDBG_MEMORY_BUDGETS", "RAYDBG_MEMORY_LEARN", "RAYDBG_MEMORY_MONITOR"):
        monkeypatch.setenv(name, raw)
    s = Settings.from_env()
    assert (s.budgets, s.learn, s.monitor) == (False, False, "off")
    assert not switch("RAYDBG_MEMORY_BUDGETS")


def test_unset_or_other_values_leave_switches_on(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RAYDBG_MEMORY_BUDGETS", "RAYDBG_MEMORY_LEARN", "RAYDBG_MEMORY_MONITOR"):
        monkeypatch.delenv(name, raising=False)
    assert Settings.from_env() == Settings()
    monkeypatch.setenv("RAYDBG_MEMORY_LEARN", "1")
    monkeypatch.setenv("RAYDBG_MEMORY_MONITOR", "dry-run")
    s = Settings.from_env()
    assert s.learn and s.monitor == "dry-run"


def test_marks_follow_the_threshold_and_min_free(monkeypatch: pytest.MonkeyPatch) -> None:
    limit = 40 * GiB
    monkeypatch.setenv("RAYDBG_MEMORY_THRESHOLD", "0.9")
    monkeypatch.setenv("RAYDBG_MEMORY_MARGIN", "0.05")
    monkeypatch.delenv("RAYDBG_MEMORY_MIN_FREE", raising=False)
    assert Settings.from_env().marks(limit) == (34 * GiB, 35 * GiB)  # 85% and 87.5%
    # 8 GiB must stay free: threshold 32 GiB instead of 36, and both marks move with it.
    monkeypatch.setenv("RAYDBG_MEMORY_MIN_FREE", str(8 * GiB))
    s = Settings.from_env()
    assert s.marks(limit) == (30 * GiB, 31 * GiB)
    assert MonitorConfig.of(s).policy.min_free == 8 * GiB  # the monitor acts there too


def test_read_once_per_process_until_reloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_MEMORY_MAX_HOLD_S", "7")
    first = settings.reload()
    monkeypatch.setenv("RAYDBG_MEMORY_MAX_HOLD_S", "9")
    assert settings.current() is first and first.max_hold_s == 7
    assert settings.reload().max_hold_s == 9
    monkeypatch.undo()
    settings.reload()
