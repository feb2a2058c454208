"""On a Ray outside the supported range (its version, as the check reads it, monkeypatched in the
job's driver): one line, no exception, raydbg installs nothing, and breakpoint() in a task
goes to Ray's own debugger (it registers its debugpy port in Ray's worker table)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

DRIVER = textwrap.dedent("""
    import json, sys, time

    from raydbg import compat

    compat.ray_version = lambda: "2.61.0"  # the only input of the range check

    import ray
    from ray.util.state import list_workers

    ray.init(address="local", num_cpus=2, logging_level="WARNING")

    @ray.remote
    def paused(x):
        y = x + 1
        breakpoint()
        return y

    ref = paused.remote(1)
    gcs = ray.get_runtime_context().gcs_address  # other clusters run on this machine too
    deadline = time.monotonic() + 240
    found = None
    while found is None and time.monotonic() < deadline:
        for w in list_workers(address=gcs, detail=True, filters=[("worker_type", "=", "WORKER")]):
            if (w.num_paused_threads or 0) > 0:
                found = {"debugger_port": w.debugger_port, "paused": w.num_paused_threads}
        time.sleep(0.5)
    print("RAY_DEBUGGER", json.dumps(found), flush=True)
    print("RUNTIME_ENV", json.dumps(ray.get_runtime_context().runtime_env), flush=True)
    ray.cancel(ref, force=True)
    ray.shutdown()
""")


def test_unsupported_ray_leaves_breakpoints_to_rays_debugger(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(DRIVER)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAYDBG_GATEWAY")}
    env.update(RAY_DEBUG="1", RAYDBG_WAIT_TIMEOUT="120")
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=420)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the job's own cluster only
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err[-3000:]
    said = [x for x in err.splitlines() if "raydbg" in x and "stays off" in x]
    assert len(said) == 1 and "found Ray 2.61.0" in said[0], err[-3000:]
    assert "Traceback" not in err
    lines = dict(x.split(" ", 1) for x in out.splitlines() if x.startswith(("RAY_DEBUGGER", "RUNTIME_ENV")))
    found = json.loads(lines["RAY_DEBUGGER"])
    assert found and found["debugger_port"] > 0, out  # Ray's own debugger holds the breakpoint
    runtime_env = json.loads(lines["RUNTIME_ENV"])
    assert "raydbg" not in json.dumps(runtime_env)  # no raydbg setup hook, no raydbg settings
