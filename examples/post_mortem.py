"""Post-mortem: an unhandled exception in a task pauses at the raising frame.

Run:  RAY_DEBUG=1 RAY_DEBUG_POST_MORTEM=1 python examples/post_mortem.py
`raydbg list` shows the session with reason `ZeroDivisionError: division by zero`; attach to
inspect `total` and `count` in the raising frame. After continue (or RAYDBG_WAIT_TIMEOUT), the
driver gets the original exception.
"""

import ray


@ray.remote(max_retries=0)
def mean(values: list[float]) -> float:
    total = sum(values)
    count = len(values)
    return total / count


if __name__ == "__main__":
    ray.init()
    try:
        ray.get(mean.remote([]))
    except ZeroDivisionError as exc:
        print("the driver got the original exception:", type(exc).__name__, exc)
