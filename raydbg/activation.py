"""Activation, the one place that puts raydbg into a job: the driver's runtime-env hook, the
worker's setup hook (it composes the worker's parts and features) and the node hook.

Workers of an activated job get raydbg at their first task from the job's settings in the
registry (the node hook, which raydbg's .pth offers every Ray worker), or, where they
cannot, from raydbg's worker_process_setup_hook added to the job's runtime_env. The user's
own hooks (RAY_RUNTIME_ENV_HOOK, worker_process_setup_hook) are chained, never replaced."""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from raydbg import config

HOOK_NAME = "raydbg.activation.runtime_env_hook"
SETUP_HOOK_NAME = "raydbg.activation.worker_setup_hook"
NODE_HOOK_NAME = "raydbg.activation.node_setup_hook"
USER_ENV_HOOK = "RAYDBG_USER_RUNTIME_ENV_HOOK"
USER_HOOK_ENV = "RAYDBG_USER_SETUP_HOOK"
CHAINED_NAME = "raydbg_chained_setup_hook"  # chain()'s wrapper

log = logging.getLogger("raydbg")


# --- The driver ---------------------------------------------------------------------------
def runtime_env(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """`ray.init(runtime_env=raydbg.runtime_env())`: activate raydbg for this job.

    Turns RAY_DEBUG on for the job even if the driver's environment lacks it.
    """
    os.environ.setdefault("RAY_DEBUG", "1")
    return with_raydbg(base)


def with_raydbg(env: dict[str, Any] | None) -> dict[str, Any]:
    """`env` for an activated job: as it is when the workers can read raydbg's settings
    from the registry (published once this driver connects), else a copy with raydbg's
    worker setup hook (chaining the user's) and settings."""
    out: dict[str, Any] = dict(env or {})
    from raydbg import compat

    if not compat.check("driver"):  # one line; the job runs with Ray's own debugger
        return out
    if workers_read_job_settings(out):
        publish_job_settings_at_connect(job_env())
    else:
        _add_setup_hook(out)
    install_driver_breakpoint()
    start_agents_at_connect()
    from raydbg.telemetry import ray_tracing

    # Before the job's first .remote(): trace context to its tasks (their hook takes it).
    ray_tracing.activate_driver()
    from raydbg.memory import settings

    if settings.current().budgets:
        # The memory monitor spares non-retriable work only if it knows each task's budget.
        from raydbg.memory import start_gate

        start_gate.driver_setup()
    return out


def job_env() -> dict[str, str]:
    """The settings a job's workers get: the carried environment, and the driver script's
    directory (RAYDBG_DRIVER_DIR: a root of the user's code, raydbg/user_code.py)."""
    from raydbg import user_code

    env = config.carried_env()
    env.pop(user_code.DRIVER_DIR_ENV, None)  # this driver's own, never one it inherited
    directory = user_code.driver_dir(getattr(sys.modules.get("__main__"), "__file__", None))
    if directory:
        env[user_code.DRIVER_DIR_ENV] = directory
    return env


def _add_setup_hook(out: dict[str, Any]) -> None:
    """raydbg's worker_process_setup_hook (chaining the user's) and settings in `out`."""
    env_vars = dict(out.get("env_vars") or {})
    for key, value in job_env().items():
        env_vars.setdefault(key, value)
    user_hook = out.get("worker_process_setup_hook")
    if user_hook is None or user_hook == SETUP_HOOK_NAME:
        out["worker_process_setup_hook"] = SETUP_HOOK_NAME
    elif isinstance(user_hook, str):
        env_vars[USER_HOOK_ENV] = user_hook
        out["worker_process_setup_hook"] = SETUP_HOOK_NAME
    elif getattr(user_hook, "__name__", "") != CHAINED_NAME:
        out["worker_process_setup_hook"] = chain(user_hook)
    out["env_vars"] = env_vars


# --- Workers set up at their first task, from the job's settings (no runtime_env) --------
# raydbg's .pth offers the node hook (below) to every Ray worker (a prestarted one
# belongs to no job yet); at the worker's first task, it reads the record this driver
# wrote under JOB_SETTINGS + job id, once connected, and sets raydbg up if there is one.
PTH_NAME = "raydbg_activate.pth"
JOB_SETTINGS = "job-settings/"
_settings_to_publish: dict[str, str] | None = None


def workers_read_job_settings(env: dict[str, Any]) -> bool:
    """Whether this job's workers can take raydbg from the registry: the job chains no
    setup hook of its own (Ray would replace the .pth's offer with it), the workers' Python
    has raydbg's .pth (the driver's, the same install on every node), and
    RAYDBG_WORKER_ACTIVATION is not `runtime_env`. Not once this process is connected: `env`
    is then a task's or actor's runtime_env, and only the setup hook reaches its workers."""
    if env.get("worker_process_setup_hook") is not None or config.worker_activation() == "runtime_env":
        return False
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return False
    import site
    import sysconfig

    dirs = {sysconfig.get_paths()["purelib"], *site.getsitepackages(), site.getusersitepackages()}
    return any(os.path.exists(os.path.join(d, PTH_NAME)) for d in dirs)


def publish_job_settings_at_connect(settings: dict[str, str]) -> None:
    """Write `settings` (the carried environment) for this driver's job once it connects."""
    global _settings_to_publish
    _settings_to_publish = settings
    from raydbg import _ray_internals

    _ray_internals.after_ray_init(_publish_job_settings)


def _publish_job_settings() -> None:
    global _settings_to_publish
    settings, _settings_to_publish = _settings_to_publish, None
    if settings is None:  # this ray.init was not activated (Ray's hooks outlive a job)
        return
    import ray

    from raydbg import registry

    job = ray.get_runtime_context().get_job_id()
    try:
        registry.put(JOB_SETTINGS + job, {"env": settings})
    except Exception as exc:
        log.warning("raydbg: could not record job %s's settings; its workers run without raydbg: %s", job, exc)


def job_settings(job_hex: str) -> dict[str, str] | None:
    """The carried environment job `job_hex` published, or None if it did not activate
    raydbg. A record names only carried settings (RAYDBG_*, OTEL_*, RAY_DEBUG*): anything
    else in it is dropped, so the registry cannot set a worker's PATH or LD_PRELOAD."""
    from raydbg import registry

    record = registry.get(JOB_SETTINGS + job_hex)
    if record is None:
        return None
    env = record.get("env")
    if not isinstance(env, dict):
        return {}
    return {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str) and config.is_carried(k)}


# --- The node agents, with the job ---------------------------------------------------------
_agents_at_connect = False


def start_agents_at_connect() -> None:
    """Once this driver connects, make sure an agent runs on every alive node and the gateway
    on the head (in the background): the memory monitor, stacks and hang detection are then
    on for the job. RAYDBG_AGENTS=off leaves that to `raydbg up`. Not once connected: `env`
    is then a task's or actor's, and the driver's connect has passed."""
    global _agents_at_connect
    ray = sys.modules.get("ray")
    if config.agents_mode() == "off" or config.is_cli_process() or (ray is not None and ray.is_initialized()):
        return
    _agents_at_connect = True
    from raydbg import _ray_internals

    _ray_internals.after_ray_init(_start_agents)


def _start_agents() -> None:
    global _agents_at_connect
    wanted, _agents_at_connect = _agents_at_connect, False
    if not wanted or not config.is_active():  # this ray.init was not activated (the hook outlives it)
        return
    import ray

    from raydbg import _ray_internals
    from raydbg.agent_host import lifecycle

    first_result = threading.Event()
    _ray_internals.after_first_result(first_result.set)
    lifecycle.ensure_all_soon(lifecycle.who(f"job {ray.get_runtime_context().get_job_id()}"), first_result)


def runtime_env_hook(env: dict[str, Any] | None) -> dict[str, Any]:
    """Named by RAY_RUNTIME_ENV_HOOK; Ray calls it in the driver during ray.init()."""
    user = os.environ.get(USER_ENV_HOOK)
    if user and user != HOOK_NAME:
        env = config.load_object(user)(env)
    if not config.is_active():
        global _settings_to_publish, _agents_at_connect
        _settings_to_publish = None
        _agents_at_connect = False
        return dict(env or {})
    return with_raydbg(env)


def _driver_breakpoint(*args: Any, **kwargs: Any) -> None:
    """breakpoint() in the driver: an ordinary local pdb prompt, not a remote wait."""
    import pdb

    pdb.Pdb().set_trace(sys._getframe(1))


def install_driver_breakpoint() -> None:
    # ray.init sets PYTHONBREAKPOINT to a remote wait; replacing the hook itself wins.
    from raydbg import _ray_internals

    if _ray_internals.worker_mode() != "worker":
        sys.breakpointhook = _driver_breakpoint


def enable_in_environ(environ: dict[str, str]) -> None:
    """Point RAY_RUNTIME_ENV_HOOK at raydbg, keeping a user's hook to chain."""
    current = environ.get("RAY_RUNTIME_ENV_HOOK")
    if current and current != HOOK_NAME:
        environ[USER_ENV_HOOK] = current
    environ["RAY_RUNTIME_ENV_HOOK"] = HOOK_NAME


# --- A worker -----------------------------------------------------------------------------
def worker_setup_hook() -> None:
    """Entry point named in runtime_env['worker_process_setup_hook']."""
    from raydbg import compat
    from raydbg.telemetry import ray_tracing

    # First, whatever else is on: a call carrying trace context must never fail here.
    ray_tracing.worker_ready()
    # On an unsupported Ray: one line, nothing installed; breakpoint() stays Ray's.
    if config.is_active() and compat.check("worker"):
        _install_worker()
    _run_user_hook()


def _install_worker() -> None:
    """The worker's parts and features, each with the hooks it needs."""
    from raydbg.gang import arrival_reader, cooperative_worker
    from raydbg.worker import hook, listeners, train, user_roots

    user_roots.note_start_dir()  # before the job's code runs: a working_dir is where it starts
    hook.install()  # breakpoint() and post-mortem
    if _start_node_agents not in listeners.ON_PAUSE:
        listeners.ON_PAUSE.append(_start_node_agents)
    cooperative_worker.worker_setup()  # stacks on request when py-spy cannot attach; idle otherwise
    arrival_reader.worker_setup()  # each step's collective arrival times in its progress record
    train.install()  # Ray Train: pause-proof group timeout, progress (a post-import hook)
    from raydbg.breakpoints import worker as armed_breakpoints

    armed_breakpoints.worker_setup()  # `raydbg break add`: arms now, then polls one KV key
    from raydbg.memory import settings

    if settings.current().budgets:
        # Retry budgets of nested submissions + the start gate (a stat and a pwrite a task).
        from raydbg.memory import start_gate

        start_gate.worker_setup()


def _start_node_agents(rec: Any) -> None:
    """A session opened: its node's agent and the gateway, started in the background if absent."""
    from raydbg.agent_host import lifecycle  # at the first pause: most workers never pause

    lifecycle.ensure_agents_for(rec)


def chain(user_hook: Any) -> Any:
    """For a user hook given as a callable: a named function Ray can export (and pickle)."""

    def raydbg_chained_setup_hook() -> None:
        worker_setup_hook()
        user_hook()

    return raydbg_chained_setup_hook


def _run_user_hook() -> None:
    name = os.environ.get(USER_HOOK_ENV)
    if not name:
        return
    config.load_object(name)()


# --- The node hook: a Ray worker of a job with no runtime_env -------------------------------
def offer_node_hook() -> None:
    """In a Ray worker's interpreter start (.pth): name the node hook, unless the job's
    runtime_env named one (Ray set the variable; raydbg's own or the user's)."""
    from raydbg import _ray_internals

    if _ray_internals.is_worker_process():
        os.environ.setdefault(_ray_internals.SETUP_HOOK_ENV, NODE_HOOK_NAME)


def node_setup_hook() -> None:
    """Run by Ray after the worker connects; its job is known at its first task only."""
    from raydbg import _ray_internals

    if os.environ.get(_ray_internals.SETUP_HOOK_ENV) == NODE_HOOK_NAME:
        # Read once; a process this worker starts (a job supervisor's driver) must not
        # inherit it: Ray refuses a job whose own hook differs from an inherited one.
        del os.environ[_ray_internals.SETUP_HOOK_ENV]
    _ray_internals.before_first_function(activate_if_asked)


def activate_if_asked(job_hex: str) -> None:
    """raydbg's worker setup, with the job's carried settings, if the job published them.
    A setting the worker's own runtime_env sets (job's or task's) keeps its value there, as
    the job's runtime_env env_vars would have under it."""
    settings = job_settings(job_hex)
    if settings is None:
        return
    import ray

    own = ray.get_runtime_context().runtime_env.get("env_vars") or {}
    for key, value in settings.items():
        if key not in own:
            os.environ[key] = value
    worker_setup_hook()
