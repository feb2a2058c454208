"""`make demo`: the examples, end to end, with no human needed (short wait timeouts)."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(title: str, script: str, **env: str) -> None:
    print(f"\n=== {title}: {script} ===", flush=True)
    full_env = {**os.environ, **env}
    subprocess.run([sys.executable, str(HERE / script)], env=full_env, check=True)


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    run("breakpoint in a task (nobody attaches: continues after 3 s)", "breakpoint_task.py",
        RAY_DEBUG="1", RAYDBG_WAIT_TIMEOUT="3")
    run("post-mortem (nobody attaches: re-raises after 3 s)", "post_mortem.py",
        RAY_DEBUG="1", RAY_DEBUG_POST_MORTEM="1", RAYDBG_WAIT_TIMEOUT="3")
    run("forward + attach from a script", "forward_attach.py")
    run("the main job: SD reference app on the embedded synthetic data, raydbg active", "sd_demo.py",
        RAY_DEBUG="1", RAYDBG_WAIT_TIMEOUT="30", SD_DEMO_STEPS="30")
    print("\nraydbg demo done.")
