"""Memory settings: one on/off parser, read once and shared, marks that honour min-free (no Ray)."""

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


def test_monitor_config_is_this_processs_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # The environment changed after the settings were read: the monitor follows the one
    # settings object, as the gate does, not a second read of the environment.
    monkeypatch.setenv("RAYDBG_MEMORY_MONITOR", "on")
    monkeypatch.setenv("RAYDBG_MEMORY_MIN_FREE", str(GiB))
    monkeypatch.setattr(settings, "_current", Settings(monitor="dry-run"))
    cfg = MonitorConfig.current()
    assert cfg.mode == "dry-run" and cfg.policy.min_free == 0


def test_activation_and_the_worker_hook_take_the_budgets_switch_from_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from raydbg import activation, compat, config
    from raydbg.breakpoints import worker as armed_breakpoints
    from raydbg.gang import cooperative_worker
    from raydbg.memory import start_gate
    from raydbg.telemetry import ray_tracing
    from raydbg.worker import hook, listeners, train

    calls: list[str] = []
    monkeypatch.setattr(start_gate, "driver_setup", lambda: calls.append("driver"))
    monkeypatch.setattr(start_gate, "worker_setup", lambda: calls.append("worker"))
    # Everything else the two hooks set up stays out of this process.
    monkeypatch.setattr(compat, "check", lambda where: True)
    monkeypatch.setattr(config, "is_active", lambda: True)
    monkeypatch.setattr(ray_tracing, "activate_driver", lambda: None)
    monkeypatch.setattr(ray_tracing, "worker_ready", lambda: None)
    monkeypatch.setattr(activation, "install_driver_breakpoint", lambda: None)
    monkeypatch.setattr(activation, "publish_job_settings_at_connect", lambda settings: None)
    monkeypatch.setattr(hook, "install", lambda: None)
    monkeypatch.setattr(cooperative_worker, "worker_setup", lambda: None)
    monkeypatch.setattr(listeners, "ON_PAUSE", [])
    monkeypatch.setattr(train, "install", lambda: None)
    monkeypatch.setattr(armed_breakpoints, "worker_setup", lambda: None)
    monkeypatch.delenv(activation.USER_HOOK_ENV, raising=False)

    monkeypatch.setenv("RAYDBG_MEMORY_BUDGETS", "1")
    monkeypatch.setattr(settings, "_current", Settings(budgets=False))
    activation.with_raydbg({})
    activation.worker_setup_hook()
    assert calls == []
    monkeypatch.setenv("RAYDBG_MEMORY_BUDGETS", "0")
    monkeypatch.setattr(settings, "_current", Settings(budgets=True))
    activation.with_raydbg({})
    activation.worker_setup_hook()
    assert calls == ["driver", "worker"]


def test_the_agent_takes_the_monitor_switch_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg.agent.monitor_state import MonitorWatch
    from raydbg.agent_host import actor

    monkeypatch.delenv("RAYDBG_MEMORY_MONITOR", raising=False)
    monkeypatch.setattr(settings, "_current", Settings(monitor="off"))
    watch = MonitorWatch()
    assert actor._spawn_memory_monitor("n1", watch) is None
    assert watch.off and watch.error is None
