"""Trace context across Ray tasks: one trace from the driver into a task and an actor.

    python examples/telemetry_ray_trace.py          # then: raydbg trace --trace <id>


Starts a local Ray cluster with raydbg's tracing start-up hook, so every driver and
worker sets up telemetry and Ray carries the W3C trace context with each call: the way
in for a job without raydbg active. With `RAY_DEBUG=1` (or `raydbg run --`) none of the
set-up below is needed: `ray.init()` and the spans are enough (docs/telemetry.md).
With no OTEL_* variables the spans land in <session_dir>/raydbg-<uid>/telemetry/*.jsonl;
set OTEL_EXPORTER_OTLP_ENDPOINT to send them to a collector instead.
"""

from __future__ import annotations

import os
import time

import ray

from raydbg import telemetry

ROWS = telemetry.counter("example.rows", "{row}", "Rows squared")


@ray.remote
def square(xs: list[int]) -> list[int]:
    with telemetry.span("example.square", rows=len(xs)):
        ROWS.add(len(xs))
        return [x * x for x in xs]


@ray.remote
class Summer:
    def total(self, parts: list[list[int]]) -> int:
        with telemetry.span("example.sum", parts=len(parts)):
            return sum(sum(p) for p in parts)


def main() -> None:
    telemetry.setup("driver")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": telemetry.runtime_env_vars()},
        **telemetry.ray_init_kwargs(),
    )
    try:
        with telemetry.span("example.pipeline") as root:
            parts = ray.get([square.remote(list(range(i, i + 10))) for i in range(0, 40, 10)])
            total = ray.get(Summer.remote().total.remote(parts))
            trace_id = format(root.get_span_context().trace_id, "032x")
        print(f"total {total}; trace {trace_id}")
        time.sleep(1.5)  # let the workers' export threads write their spans
        where = os.path.dirname(telemetry.stats()["jsonl_path"])
        print(f"see it with: raydbg trace --dir {where} --trace {trace_id[:8]}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
