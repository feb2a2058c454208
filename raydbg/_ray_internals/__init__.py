"""Ray's private modules and internals raydbg patches or reads, in one package (written for Ray 2.51.0 to 2.60.x).

Where those releases differ, a module detects what Ray has, never reads its version.

Everything else in raydbg uses Ray's public API. When Ray changes, this is the package to
check: each module's docstring names the Ray version it was written for and the private
things it relies on. tests/test_ray_private_uses.py fails when a module outside it
imports a private Ray module or reads `_x` of a Ray name.

  train.py           Ray Train V2: torch backend patches, live runs and their workers' ranks,
                     every run's attempts (the state actor)
  tracing.py         Ray's task tracing at (almost) no cost outside any span
  otel_context.py    whether a span is current (what tracing.py and task_submit.py ask)
  task_submit.py     the one wrapper of `RemoteFunction._remote`: budgets, untraced calls
  task_start.py      the memory start gate around every normal task of a worker
  activation.py      a worker's setup hook and first function, a driver's connect and shutdown
  process.py         this process as Ray knows it: mode, session dir, node, running task
  running_code.py    what this worker runs: task functions, actor classes, a Train run's loop
  post_mortem.py     Ray's task-error path routed to raydbg
  gcs.py             GCS without ray.init: client, GlobalState, task events, live actors,
                     the dashboard's address
  authentication.py  Ray's own token, and whether this Ray has token authentication
  features.py        what this Ray lacks of what raydbg would use (`raydbg status`)

Everyone else imports this package, not its modules: `from raydbg import _ray_internals`.

Ray couplings left outside this package, and why:
  registry.py: `ray.experimental.internal_kv.internal_kv_get_gcs_client()` (a public
    module; the GcsClient it returns is a `_raylet` class, used by its public
    `internal_kv_*` methods).
  gcs_tables.py: field names of the protobuf rows `all_task_events` and
    `alive_actor_rows` return (TaskEvents, ActorTableData): data, read as plain fields.
  ray_processes.py, memory/worker_tasks.py, memory/killer.py: process titles (`ray::IDLE`,
    `ray::<task>`) and the raylet's command line: Ray's process conventions, not Python APIs.
  ray_nodes.py: the head's `node:__internal_head__` resource in `ray.nodes()` (public API,
    Ray's own marker of the head node).
"""

from __future__ import annotations

from raydbg._ray_internals.activation import (
    SETUP_HOOK_ENV,
    WORKER_SCRIPT,
    after_first_result,
    after_ray_init,
    before_first_function,
    before_ray_shutdown,
    is_worker_process,
)
from raydbg._ray_internals.authentication import ray_auth_token, token_auth_in_ray
from raydbg._ray_internals.data_iter import DATA_ITERATOR_MODULE, wrap_iter_batches
from raydbg._ray_internals.features import missing_features
from raydbg._ray_internals.gcs import (
    alive_actor_rows,
    all_task_events,
    dashboard_url,
    gcs_client,
    gcs_state,
)
from raydbg._ray_internals.post_mortem import POST_MORTEM_MODULES, route_post_mortem
from raydbg._ray_internals.process import (
    current_task_id_hex,
    node_identity,
    owns_cluster,
    session_dir,
    worker_mode,
)
from raydbg._ray_internals.running_code import objects as running_objects
from raydbg._ray_internals.running_code import signature as running_signature
from raydbg._ray_internals.task_start import gate_task_functions
from raydbg._ray_internals.task_submit import (
    default_task_max_retries,
    unwrap_task_submit,
    wrap_task_submit,
)
from raydbg._ray_internals.tracing import (
    TRACING_HELPER_MODULE,
    cluster_tracing_hook,
    enable_task_tracing,
    task_tracing_enabled,
)
from raydbg._ray_internals.train import (
    TORCH_CONFIG_MODULE,
    TRAIN_ACTIVE,
    TRAIN_FN_UTILS_MODULE,
    live_runs,
    train_run_records,
    train_runs,
    wrap_torch_pg_setup,
    wrap_torch_shutdown,
    wrap_train_report,
)

# The Ray releases this package was written for (compat.SUPPORTED_RAY: the tested range).
RAY_VERSIONS_WRITTEN_FOR = ("2.51.0", "2.60.0")

__all__ = [
    "DATA_ITERATOR_MODULE",
    "POST_MORTEM_MODULES",
    "RAY_VERSIONS_WRITTEN_FOR",
    "SETUP_HOOK_ENV",
    "TORCH_CONFIG_MODULE",
    "TRACING_HELPER_MODULE",
    "TRAIN_ACTIVE",
    "TRAIN_FN_UTILS_MODULE",
    "WORKER_SCRIPT",
    "after_first_result",
    "after_ray_init",
    "alive_actor_rows",
    "all_task_events",
    "before_first_function",
    "before_ray_shutdown",
    "cluster_tracing_hook",
    "current_task_id_hex",
    "dashboard_url",
    "default_task_max_retries",
    "enable_task_tracing",
    "gate_task_functions",
    "gcs_client",
    "gcs_state",
    "is_worker_process",
    "live_runs",
    "missing_features",
    "node_identity",
    "owns_cluster",
    "ray_auth_token",
    "route_post_mortem",
    "running_objects",
    "running_signature",
    "session_dir",
    "task_tracing_enabled",
    "train_run_records",
    "token_auth_in_ray",
    "train_runs",
    "unwrap_task_submit",
    "worker_mode",
    "wrap_iter_batches",
    "wrap_task_submit",
    "wrap_torch_pg_setup",
    "wrap_torch_shutdown",
    "wrap_train_report",
]
