"""Files raydbg writes in shared places: per-uid 0700 dirs checked, symlinks never followed, secrets not carried."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from other_user import as_other_user, can_be_other_user

from raydbg import auth, config
from raydbg.agent.monitor_state import START_GRACE_S, MonitorWatch
from raydbg.memory import node_files, service
from raydbg.private_dir import UnsafeDirError, check_private, create_new, private_dir
from raydbg.telemetry import output_dir
from raydbg.telemetry.jsonl import JsonlFile

NOBODY = 65534
MINE = f"raydbg-{os.getuid()}"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="O_NOFOLLOW and uids: Linux")


@pytest.fixture
def bait(tmp_path: Path) -> Path:
    """A file another user would like raydbg to write through a planted symlink."""
    target = tmp_path / "victim"
    target.write_text("untouched")
    return target


def _other_users_dir(path: Path) -> Path:
    if os.getuid() != 0:
        pytest.skip("needs root to make a directory owned by another uid")
    path.mkdir(mode=0o700)
    os.chown(path, NOBODY, NOBODY)
    return path


def test_a_directory_made_first_by_another_uid_is_refused(tmp_path: Path) -> None:
    _other_users_dir(tmp_path / MINE)
    with pytest.raises(UnsafeDirError, match=f"belongs to uid {NOBODY}, not {os.getuid()}; refusing"):
        private_dir(tmp_path, "tasks")
    assert not (tmp_path / MINE / "tasks").exists()  # nothing made inside it


def test_a_directory_open_to_others_is_refused_and_one_made_here_is_0700(tmp_path: Path) -> None:
    (tmp_path / MINE).mkdir()
    os.chmod(tmp_path / MINE, 0o777)
    with pytest.raises(UnsafeDirError, match="has mode 777, open to other users"):
        private_dir(tmp_path, "memory")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made = private_dir(fresh, "memory")
    assert made == fresh / MINE / "memory"
    for d in (made, made.parent):
        st = os.lstat(d)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


def test_a_base_that_does_not_exist_yet_is_made_ours_and_0700(tmp_path: Path) -> None:
    """RAYDBG_PROGRESS_BASE=/a/new/dir: made, not a silent failure of every record under it."""
    made = private_dir(tmp_path / "new" / "base", "progress")
    assert made == tmp_path / "new" / "base" / MINE / "progress"
    st = os.lstat(tmp_path / "new" / "base")
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


@can_be_other_user
def test_a_made_base_is_closed_to_another_user_and_one_they_made_first_is_refused() -> None:
    """Played as uid 65534: the base raydbg makes can be neither listed nor written into; a base
    that user made first (in an open parent, before raydbg looked) is refused, nothing made in it."""
    parent = Path(tempfile.mkdtemp(prefix="raydbg-base-", dir="/tmp"))
    try:
        os.chmod(parent, 0o777)  # as open as a shared /tmp without the sticky bit
        made = private_dir(parent / "ours", "progress")

        def try_ours_then_make_theirs() -> str:
            tried = []
            for attempt in (lambda: os.listdir(parent / "ours"), lambda: open(parent / "ours" / "planted", "w")):
                try:
                    attempt()
                    tried.append("done")
                except PermissionError:
                    tried.append("refused")
            os.mkdir(parent / "theirs")
            return " ".join(tried)

        assert as_other_user(try_ours_then_make_theirs) == "refused refused"
        assert made.is_dir() and not (parent / "ours" / "planted").exists()
        with pytest.raises(UnsafeDirError):
            private_dir(parent / "theirs", "progress")
        assert list((parent / "theirs").iterdir()) == []
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_a_symlink_planted_as_the_directory_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / MINE).symlink_to(elsewhere)
    with pytest.raises(UnsafeDirError, match="not a plain directory"):
        private_dir(tmp_path, "tasks")
    assert list(elsewhere.iterdir()) == []


def test_run_dir_records_flags_and_reservations_never_follow_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bait: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("RAYDBG_RUN_DIR", str(run))
    (run / str(os.getpid())).symlink_to(bait)
    (run / f"reserve-{os.getpid()}").symlink_to(bait)
    (run / "pressure-n1").symlink_to(bait)
    with pytest.raises(OSError) as e:
        node_files.RunningRecord(run).write_static("t", 0, '"name": "f"')
    assert e.value.errno == errno.ELOOP
    node_files.reserve(1 << 30, run)  # refused quietly: the gate never breaks a task
    node_files.set_flag(run / "pressure-n1", True, "1 2 memory")
    assert bait.read_text() == "untouched"


def test_an_unsafe_run_dir_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafeDirError, match="has mode 777"):
        node_files.ensure_run_dir(shared)
    other = _other_users_dir(tmp_path / "others")
    with pytest.raises(UnsafeDirError, match=f"belongs to uid {NOBODY}"):
        node_files.ensure_run_dir(other)
    node_files.reserve(5, other)  # the gate's writes refuse it too (an OSError they already handle)
    assert list(other.iterdir()) == []


def test_the_monitor_lock_and_log_never_follow_a_symlink(tmp_path: Path, bait: Path) -> None:
    d = tmp_path / "locks"
    d.mkdir(mode=0o700)
    (d / "memory-n1.lock").symlink_to(bait)
    with pytest.raises(OSError) as e:
        service.take_lock("n1", str(d))
    assert e.value.errno == errno.ELOOP
    lock = service.take_lock("n2", str(d))
    assert lock is not None and service.take_lock("n2", str(d)) is None  # one monitor per node
    lock.close()
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafeDirError):
        service.take_lock("n1", str(shared))
    log = tmp_path / "raydbg_memory.log"
    log.symlink_to(bait)
    with pytest.raises(OSError) as e:
        service.spawn("127.0.0.1:1", "n1", log_path=str(log))
    assert e.value.errno == errno.ELOOP and bait.read_text() == "untouched"


def test_token_files_are_private_and_never_written_through_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bait: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    path = auth.save_cluster_token("10.1.2.3:8300", "t1")
    assert path.read_text() == "t1\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    path.unlink()
    path.symlink_to(bait)
    auth.save_cluster_token("10.1.2.3:8300", "t2")  # replaces the link, does not follow it
    assert bait.read_text() == "untouched" and not path.is_symlink() and path.read_text() == "t2\n"
    os.chmod(path.parent, 0o755)
    with pytest.raises(UnsafeDirError, match="has mode 755"):
        auth.save_cluster_token("10.1.2.3:8300", "t3")
    with pytest.raises(FileExistsError):
        create_new(path)  # O_EXCL: never reuses what is there


def test_a_sessions_telemetry_files_are_private_and_outside_rays_session_dir(
        tmp_path: Path, bait: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    session = tmp_path / "ray" / "session_2026-12-06_1_2"
    session.mkdir(parents=True)
    os.chmod(session, 0o777)  # as Ray makes its session dirs
    monkeypatch.setattr(output_dir, "session_dir", lambda: str(session))
    tdir = Path(output_dir.session_telemetry_dir() or "")
    assert tdir == tmp_path / MINE / "sessions" / session.name / "telemetry"
    f = JsonlFile("worker-1.jsonl", lambda: str(tdir), str(tmp_path / "fallback"), {"a": 1})
    f.write([{"type": "span", "name": "x"}])
    f.close()
    for d in (tdir, tdir.parent, tdir.parent.parent, tdir.parent.parent.parent):
        check_private(d)
    assert stat.S_IMODE(os.stat(tdir / "worker-1.jsonl").st_mode) == 0o600
    assert list(session.iterdir()) == []  # nothing of ours in Ray's shared folder
    # Someone made our directory first, open to all: refused, nothing written there.
    os.chmod(tmp_path / MINE / "sessions", 0o777)
    g = JsonlFile("worker-1.jsonl", lambda: str(tmp_path / MINE / "sessions" / "session_x" / "telemetry"), "", {})
    with pytest.raises(UnsafeDirError):
        g.write([{"type": "span"}])
    assert not (tmp_path / MINE / "sessions" / "session_x").exists()
    os.chmod(tmp_path / MINE / "sessions", 0o700)
    # A symlink planted where the file goes is not followed.
    (tdir / "worker-2.jsonl").symlink_to(bait)
    h = JsonlFile("worker-2.jsonl", lambda: str(tdir), "", {})
    with pytest.raises(OSError):
        h.write([{"type": "span"}])
    assert bait.read_text() == "untouched"
    assert output_dir.fallback_dir() == str(tmp_path / MINE / "telemetry")


def test_secrets_are_not_carried_into_a_jobs_runtime_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from raydbg.telemetry.settings import carried_env

    for k in list(os.environ):
        if k.startswith(("RAYDBG_", "OTEL_")):
            monkeypatch.delenv(k)
    secrets = {
        "RAYDBG_TOKEN": "s1",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer s2",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=s3",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-api-key=s4",
        "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "x-api-key=s5",
        "RAYDBG_SOME_SECRET": "s6",
    }
    plain = {"RAYDBG_WAIT_TIMEOUT": "30", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "RAY_DEBUG": "1"}
    for k, v in {**secrets, **plain}.items():
        monkeypatch.setenv(k, v)
    assert config.carried_env() == plain
    assert carried_env(os.environ) == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    from raydbg import activation

    published: list[dict[str, str]] = []
    monkeypatch.setattr(activation, "publish_job_settings_at_connect", published.append)
    assert activation.with_raydbg({"env_vars": {"MINE": "1"}}) == {"env_vars": {"MINE": "1"}}
    # The job's settings record (workers set up at their first task): the carried settings and
    # the driver's directory (a root of the user's code), no secret.
    assert len(published) == 1 and not set(published[0]) & set(secrets)
    assert {k: v for k, v in published[0].items() if k != "RAYDBG_DRIVER_DIR"} == plain
    monkeypatch.setenv("RAYDBG_WORKER_ACTIVATION", "runtime_env")
    env = activation.with_raydbg({"env_vars": {"MINE": "1"}})["env_vars"]
    assert not set(secrets) & set(env) and env["MINE"] == "1" and env["RAYDBG_WAIT_TIMEOUT"] == "30"


def test_the_agent_never_reports_a_monitor_as_running_without_its_word() -> None:
    w = MonitorWatch(started=1000.0)
    assert w.state(None, None, 1001.0) == {"state": "starting"}
    assert w.state({"state": "running", "ts": 1001.5}, None, 1002.0) == {"state": "running"}
    stale = w.state({"state": "running", "ts": 1001.5}, None, 1001.5 + START_GRACE_S + 1)
    assert stale["state"] == "failed" and "no status from the monitor" in stale["reason"]
    assert w.needs_event(stale) and not w.needs_event(stale)  # one event, not one a second
    # An earlier monitor's record (before this agent) does not count as ours.
    old = MonitorWatch(started=2000.0)
    assert old.state({"state": "running", "ts": 1990.0}, None, 2001.0) == {"state": "starting"}
    died = old.state(None, 1, 2002.0)
    assert died == {"state": "failed", "reason": "the monitor exited with code 1 (see raydbg_memory.log)"}
    # The monitor reported its own failure (and its event): shown, no second event.
    own = MonitorWatch(started=3000.0)
    said = own.state({"state": "failed", "error": "raydbg: /x has mode 777", "ts": 3001.0}, 2, 3002.0)
    assert said == {"state": "failed", "reason": "raydbg: /x has mode 777"} and not own.needs_event(said)
    assert MonitorWatch(off=True).state(None, None, 0.0) == {"state": "off"}
    boom = MonitorWatch(error="could not be started: no GCS")
    assert boom.state(None, None, 0.0) == {"state": "failed", "reason": "could not be started: no GCS"}


def test_the_kill_note_goes_to_the_workers_own_log_not_a_swapped_path(tmp_path: Path, bait: Path) -> None:
    import subprocess

    log = tmp_path / "worker-1.err"
    with open(log, "wb") as err:
        child = subprocess.Popen(["sleep", "30"], stderr=err)
    try:
        moved = tmp_path / "moved.err"
        log.rename(moved)  # someone swaps the name for a link to a file of their choice
        log.symlink_to(bait)
        assert service.worker_log_line(child.pid, "raydbg: killed")  # reached by its own fd
        assert moved.read_text() == "raydbg: killed\n"
        assert bait.read_text() == "untouched"
    finally:
        child.kill()
        child.wait()


def test_readers_take_only_regular_files_of_ours(tmp_path: Path) -> None:
    """A FIFO planted as a metrics snapshot would block every /metrics reader for ever (and,
    a few scrapes on, the thread pool every gateway call needs); another uid's file is theirs."""
    import threading

    from raydbg.private_dir import open_own_file
    from raydbg.telemetry import prometheus

    os.mkfifo(tmp_path / "worker-9.metrics.json")
    (tmp_path / "worker-8.metrics.json").symlink_to(tmp_path / "elsewhere")
    done = threading.Event()
    threading.Thread(target=lambda: (prometheus.prometheus_text(directory=str(tmp_path)), done.set()),
                     daemon=True).start()
    assert done.wait(10), "the reader blocked on a planted FIFO"
    for name in ("worker-9.metrics.json", "worker-8.metrics.json"):
        with pytest.raises(OSError):
            open_own_file(tmp_path / name)
    if os.getuid() == 0:
        theirs = tmp_path / "worker-7.metrics.json"
        theirs.write_text("{}")
        os.chown(theirs, NOBODY, NOBODY)
        with pytest.raises(UnsafeDirError, match=f"belongs to uid {NOBODY}"):
            open_own_file(theirs)
