"""Unit tests of the debugger core's pure parts: records, relay rewriting, tokens, activation."""

from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import msgspec
import pytest

from raydbg import activation, auth, config, records
from raydbg.agent.dap_rewrite import DapReframer, DapStreamError, encode
from raydbg.schema import ExceptionInfo, SessionRecord


def _frame(message: dict) -> bytes:
    return encode(message)


def test_reframer_rewrites_attach_and_continue_for_per_thread_sessions() -> None:
    r = DapReframer()
    attach = {"seq": 2, "type": "request", "command": "attach", "arguments": {"justMyCode": True}}
    cont = {"seq": 3, "type": "request", "command": "continue", "arguments": {"threadId": 7}}
    out = r.feed(_frame(attach) + _frame(cont))
    assert len(out) == 2
    first = json.loads(out[0].split(b"\r\n\r\n", 1)[1])
    second = json.loads(out[1].split(b"\r\n\r\n", 1)[1])
    assert first["arguments"] == {"justMyCode": True, "stopAllThreadsOnSuspend": False,
                                  "steppingResumesAllThreads": False}
    assert second["arguments"] == {"threadId": 7, "singleThread": True}


def test_reframer_keeps_a_clients_own_choice_and_other_messages() -> None:
    r = DapReframer()
    attach = {"seq": 1, "type": "request", "command": "attach", "arguments": {"stopAllThreadsOnSuspend": True}}
    other = {"seq": 2, "type": "request", "command": "threads"}
    out = [json.loads(b.split(b"\r\n\r\n", 1)[1]) for b in r.feed(_frame(attach) + _frame(other))]
    assert out[0]["arguments"]["stopAllThreadsOnSuspend"] is True
    assert out[1] == other


def test_reframer_handles_split_bytes() -> None:
    r = DapReframer()
    data = _frame({"seq": 1, "type": "request", "command": "threads"})
    got = []
    for i in range(len(data)):
        got += r.feed(data[i:i + 1])
    assert len(got) == 1 and got[0] == data


@pytest.mark.parametrize("junk", [b"GET / HTTP/1.1\r\n\r\n", b"Content-Length: x\r\n\r\n",
                                  b"Content-Length: 3\r\n\r\n[1]", b"Content-Length: 3\r\n\r\n{{{",
                                  b"A" * 5000])
def test_reframer_refuses_what_is_not_dap(junk: bytes) -> None:
    with pytest.raises(DapStreamError):
        DapReframer().feed(junk)


def test_record_json_and_labels() -> None:
    rec = SessionRecord(id="abc", job_id="01000000", pid=1, thread_id=2, thread_name="MainThread",
                        file="/x.py", line=3, function="f", reason="exception",
                        exception=ExceptionInfo(type="ValueError", message="bad", traceback=""),
                        task_name="Counter.add", train_rank=0, since=100.0)
    data = json.loads(rec.to_json())
    assert data["attachable"] is False and data["state"] == "starting"
    assert msgspec.convert(data, SessionRecord) == rec
    assert records.label(data) == "Counter.add [rank 0]"
    assert records.reason_text(data) == "ValueError: bad"
    assert records.paused_for(data, now=100.0 + 125) == "2m05s"


def test_token_file_is_private_and_client_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "dir" / "token"
    auth.write_private(path, "secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    monkeypatch.setenv("HOME", str(tmp_path))
    saved = auth.save_cluster_token("10.0.0.1:8265", "secret")
    assert saved == tmp_path / ".raydbg" / "tokens" / "10.0.0.1_8265"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert stat.S_IMODE(saved.parent.stat().st_mode) == 0o700
    monkeypatch.delenv("RAYDBG_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "ray-token")
    assert auth.client_token(gateway="10.0.0.1:8265") == "secret"
    # Another gateway never gets this cluster's token: it gets Ray's (or nothing).
    assert auth.client_token(gateway="10.0.0.2:8265") == "ray-token"
    assert auth.client_token() == "ray-token"
    monkeypatch.setenv("RAYDBG_TOKEN", "env-token")
    assert auth.client_token(gateway="10.0.0.1:8265") == "env-token"
    other = tmp_path / "other"
    other.write_text("from-file\n")
    assert auth.client_token(str(other)) == "from-file"
    with pytest.raises(auth.TokenError):
        auth.client_token(str(tmp_path / "missing"))


def test_token_check_is_exact() -> None:
    assert auth.check("abc", "abc")
    assert not auth.check("abd", "abc") and not auth.check(None, "abc") and not auth.check("", "abc")
    assert auth.bearer("Bearer xyz") == "xyz" and auth.bearer("Basic xyz") is None


def test_with_raydbg_chains_user_hooks_and_carries_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_DEBUG", "1")
    monkeypatch.setenv("RAYDBG_WAIT_TIMEOUT", "5")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x")
    env = activation.with_raydbg({"env_vars": {"RAYDBG_WAIT_TIMEOUT": "9"},
                                  "worker_process_setup_hook": "my.module.hook"})
    assert env["worker_process_setup_hook"] == activation.SETUP_HOOK_NAME
    assert env["env_vars"]["RAYDBG_USER_SETUP_HOOK"] == "my.module.hook"
    assert env["env_vars"]["RAYDBG_WAIT_TIMEOUT"] == "9"  # the job's own value wins
    assert env["env_vars"]["RAY_DEBUG"] == "1"
    assert env["env_vars"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://x"

    def user_hook() -> None:
        pass

    chained = activation.with_raydbg({"worker_process_setup_hook": user_hook})
    hook = chained["worker_process_setup_hook"]
    assert callable(hook) and hook.__name__ == activation.CHAINED_NAME
    again = activation.with_raydbg(chained)
    assert again["worker_process_setup_hook"] is hook  # idempotent, never chained twice


def test_workers_take_raydbg_from_the_registry_unless_the_job_names_its_own_hook(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    import ray

    published: list[dict[str, str]] = []
    monkeypatch.setattr(activation, "publish_job_settings_at_connect", published.append)
    monkeypatch.setenv("RAY_DEBUG", "1")
    monkeypatch.setenv("RAYDBG_WAIT_TIMEOUT", "5")
    monkeypatch.delenv("RAYDBG_WORKER_ACTIVATION", raising=False)
    assert activation.workers_read_job_settings({})  # this install's .pth is in site-packages
    assert activation.with_raydbg({}) == {}  # no runtime_env: Ray's costs every task
    assert published[-1]["RAYDBG_WAIT_TIMEOUT"] == "5" and published[-1]["RAY_DEBUG"] == "1"
    # Ray would replace the .pth's offer with the job's own hook: raydbg chains it instead.
    assert not activation.workers_read_job_settings({"worker_process_setup_hook": "my.hook"})
    monkeypatch.setenv("RAYDBG_WORKER_ACTIVATION", "runtime_env")
    assert not activation.workers_read_job_settings({})
    monkeypatch.setenv("RAYDBG_WORKER_ACTIVATION", "bogus")
    with caplog.at_level("WARNING", logger="raydbg"):
        assert activation.workers_read_job_settings({})
    assert "RAYDBG_WORKER_ACTIVATION='bogus' is not one of auto|runtime_env" in caplog.text
    # Once connected, an env is a task's or actor's (`.options(runtime_env=...)`): no job
    # record would reach its workers.
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    assert not activation.workers_read_job_settings({})


def test_a_job_settings_record_sets_only_carried_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Anyone who can write the cluster's KV can write a record: it never sets a worker's
    PATH, LD_PRELOAD or PYTHONPATH, nor a secret."""
    from raydbg import registry

    carried = {"RAYDBG_WAIT_TIMEOUT": "3", "OTEL_SERVICE_NAME": "svc", "RAY_DEBUG": "1"}
    records = {
        "job-settings/01000000": {"env": {**carried, "LD_PRELOAD": "/tmp/evil.so", "PATH": "/evil",
                                          "PYTHONPATH": "/evil", "RAYDBG_TOKEN": "stolen", "RAYDBG_N": 5}},
        "job-settings/02000000": {"env": "not an object"},
    }
    monkeypatch.setattr(registry, "get", lambda key, gcs=None: records.get(key))
    assert activation.job_settings("01000000") == carried
    assert activation.job_settings("02000000") == {}
    assert activation.job_settings("03000000") is None  # a job that did not activate raydbg


def test_the_pth_offers_raydbgs_hook_to_ray_workers_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from raydbg import _ray_internals, activation

    var = _ray_internals.SETUP_HOOK_ENV
    monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAY_RAYLET_PID", "1")
    monkeypatch.setattr(sys, "argv", ["/home/me/train.py"])  # e.g. a job supervisor's driver
    activation.offer_node_hook()
    assert var not in os.environ
    monkeypatch.setattr(sys, "argv", ["/x/ray/_private/workers/default_worker.py", "--node-ip-address=n"])
    monkeypatch.setenv(var, "user.hook")  # Ray set it from the job's runtime_env
    activation.offer_node_hook()
    assert os.environ[var] == "user.hook"
    monkeypatch.delenv(var)
    activation.offer_node_hook()
    assert os.environ[var] == activation.NODE_HOOK_NAME
    monkeypatch.delenv("RAY_RAYLET_PID")
    monkeypatch.delenv(var)
    activation.offer_node_hook()  # not started by a raylet
    assert var not in os.environ


def test_enable_in_environ_keeps_a_users_hook() -> None:
    environ = {"RAY_RUNTIME_ENV_HOOK": "user.hook"}
    activation.enable_in_environ(environ)
    assert environ["RAY_RUNTIME_ENV_HOOK"] == activation.HOOK_NAME
    assert environ[activation.USER_ENV_HOOK] == "user.hook"
    activation.enable_in_environ(environ)
    assert environ[activation.USER_ENV_HOOK] == "user.hook"


@pytest.mark.parametrize("flag,disable,active", [("1", None, True), ("legacy", None, False), ("", None, False),
                                                 ("0", None, False), ("1", "1", False)])
def test_is_active(monkeypatch: pytest.MonkeyPatch, flag: str, disable: str | None, active: bool) -> None:
    monkeypatch.setenv("RAY_DEBUG", flag)
    if disable:
        monkeypatch.setenv("RAYDBG_DISABLE", disable)
    else:
        monkeypatch.delenv("RAYDBG_DISABLE", raising=False)
    assert config.is_active() is active


def test_wait_timeout_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, want in [("", None), ("2.5", 2.5), ("0", None), ("abc", None)]:
        monkeypatch.setenv("RAYDBG_WAIT_TIMEOUT", raw)
        assert config.wait_timeout() == want


def test_pth_hook_is_installed_and_cheap() -> None:
    import site
    import subprocess
    import sys

    paths = [Path(p) / "raydbg_activate.pth" for p in site.getsitepackages()]
    assert any(p.exists() for p in paths), "raydbg_activate.pth missing from site-packages"
    code = "import os; print(os.environ.get('RAY_RUNTIME_ENV_HOOK'))"
    on = subprocess.run([sys.executable, "-c", code], env={**os.environ, "RAY_DEBUG": "1"},
                        capture_output=True, text=True)
    off = subprocess.run([sys.executable, "-c", code], env={k: v for k, v in os.environ.items()
                                                          if k not in ("RAY_DEBUG", "RAY_RUNTIME_ENV_HOOK")},
                         capture_output=True, text=True)
    assert on.stdout.strip() == activation.HOOK_NAME
    assert off.stdout.strip() == "None"


# What the .pth costs where raydbg is not asked for: the modules it leaves imported.
LOADED = ("import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
          "('raydbg', 'ray', 'debugpy', 'aiohttp', 'opentelemetry', 'psutil', 'grpc')))")


def test_pth_hook_costs_nothing_without_ray_debug_and_little_in_a_ray_worker(tmp_path: Path) -> None:
    import subprocess
    import sys

    plain = {k: v for k, v in os.environ.items() if k not in ("RAY_DEBUG", "RAY_RUNTIME_ENV_HOOK")}
    # Any interpreter started without RAY_DEBUG: raydbg is not imported at all.
    out = subprocess.run([sys.executable, "-c", LOADED], env=plain, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    # A Ray worker (as the .pth recognises one) of a job that did not ask for raydbg: the
    # node hook's few small modules, nothing of raydbg's worker, debugpy, aiohttp, OTel or Ray.
    worker = tmp_path / "default_worker.py"
    worker.write_text(LOADED)
    out = subprocess.run([sys.executable, str(worker)], env={**plain, "RAY_RAYLET_PID": "1"},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    loaded = set(ast.literal_eval(out.stdout))
    assert "raydbg._pth_hook" in loaded  # recognised as a worker: the node hook is offered
    allowed = {"raydbg", "raydbg._pth_hook", "raydbg.activation", "raydbg.config", "raydbg.version"}
    assert {m for m in loaded if not m.startswith("raydbg._ray_internals")} <= allowed, loaded


SHOW_ENV = ("import os, sys; print(os.environ.get('RAY_DEBUG'), os.environ.get('RAY_DEBUG_POST_MORTEM'), "
            "os.environ.get('RAY_RUNTIME_ENV_HOOK'), os.environ.get('RAYDBG_USER_RUNTIME_ENV_HOOK')); sys.exit(7)")


def test_raydbg_run_starts_the_command_with_raydbg_active() -> None:
    import subprocess
    import sys

    plain = {k: v for k, v in os.environ.items()
             if not k.startswith(("RAY_DEBUG", "RAY_RUNTIME_ENV_HOOK", "RAYDBG_USER_RUNTIME_ENV_HOOK"))}
    raydbg = [sys.executable, "-m", "raydbg", "run"]
    out = subprocess.run([*raydbg, "--", sys.executable, "-c", SHOW_ENV], env=plain, capture_output=True, text=True)
    assert out.returncode == 7, out.stderr  # the command's own exit status
    assert out.stdout.split() == ["1", "None", activation.HOOK_NAME, "None"]
    # --post-mortem; and a user's own runtime-env hook is kept for raydbg to chain.
    out = subprocess.run([*raydbg, "--post-mortem", "--", sys.executable, "-c", SHOW_ENV],
                         env={**plain, "RAY_RUNTIME_ENV_HOOK": "mine.hook"}, capture_output=True, text=True)
    assert out.returncode == 7 and out.stdout.split() == ["1", "1", activation.HOOK_NAME, "mine.hook"], out
    # Bad input: one line, no traceback.
    for args in ([], ["--", "no-such-command-here"]):
        out = subprocess.run([*raydbg, *args], env=plain, capture_output=True, text=True)
        assert out.returncode != 0 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
