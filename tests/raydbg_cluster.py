"""A real local Ray cluster with raydbg active and its gateway, for the DAP/TUI e2e tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
ENV = {"RAY_DEBUG": "1", "RAYDBG_WAIT_TIMEOUT": "120"}


@contextmanager
def raydbg_cluster(*by_value: ModuleType) -> Iterator[tuple[str, str, str]]:
    """Yields (gcs_address, gateway_address, token); 2 CPUs, shut down afterwards.

    ``by_value``: test modules whose functions workers cannot import (tests/ is not
    on their path); they are pickled by value, keeping their file and line numbers.
    """
    import ray
    from ray import cloudpickle

    import raydbg
    from raydbg.client import Gateway

    saved = {k: os.environ.get(k) for k in (*ENV, "RAY_ADDRESS", "RAYDBG_GATEWAY")}
    os.environ.update(ENV)
    os.environ.pop("RAYDBG_GATEWAY", None)
    for module in by_value:
        cloudpickle.register_pickle_by_value(module)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        runtime_env=raydbg.runtime_env(),
        logging_level="WARNING",
    )
    try:
        address = str(ray.get_runtime_context().gcs_address)
        up = subprocess.run(
            [sys.executable, "-m", "raydbg", "up"],
            env={**os.environ, "RAY_ADDRESS": address},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert up.returncode == 0, up.stderr
        os.environ["RAY_ADDRESS"] = address
        found = Gateway.discover()
        yield address, found.address, found.token
    finally:
        ray.shutdown()
        for module in by_value:
            cloudpickle.unregister_pickle_by_value(module)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
