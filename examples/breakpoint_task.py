"""A breakpoint() in a Ray task: it pauses, shows up in `raydbg list`, and waits for a client.

Run:  RAY_DEBUG=1 python examples/breakpoint_task.py
Then, in another shell:  raydbg list ;  raydbg forward <ID> --port 5678
and attach any DAP client (VS Code "Python Debugger: Attach", port 5678), or `raydbg attach <ID>`.
With RAYDBG_WAIT_TIMEOUT=N the task goes on by itself after N seconds if nobody attaches.
"""

import ray


@ray.remote
def scale(values: list[float], factor: float) -> list[float]:
    scaled = [v * factor for v in values]
    breakpoint()  # inspect `scaled` here
    return scaled


if __name__ == "__main__":
    ray.init()
    print("result:", ray.get(scale.remote([1.0, 2.0, 3.0], 10.0)))
