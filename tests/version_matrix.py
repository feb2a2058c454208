"""The Ray x Python version matrix: which tests each entry runs, and docs/support.md rendered
from what the entries ran (their JUnit XML), never written by hand.

Each entry (Makefile: MATRIX) is a light venv, raydbg without the SD extra, on one Ray and
one Python; it runs only the tests that touch Ray internals or differ by version.

  python tests/version_matrix.py ids [--python-only] the node ids one entry runs (--python-only:
                                                     an entry on the main suite's Ray)
  python tests/version_matrix.py versions            this interpreter's Ray and Python (JSON)
  python tests/version_matrix.py render DIR > docs/support.md
      DIR holds, per entry, NAME.xml (pytest --junitxml; main-<part>.xml for the main suite
      run in parts) and NAME.json (`versions`)
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

E2E = "tests/e2e"
CONTEXTS = f"{E2E}/test_debug_contexts.py"
CORE = f"{E2E}/test_core_cluster.py"

# Feature -> the existing tests that show it works; one cluster per module, shared by its tests.
FEATURES: list[tuple[str, list[str]]] = [
    ("Ray adapter: task events, live actors, token auth, tracing proxy", ["tests/test_ray_versions.py"]),
    ("agents start with the job; `status` and `--version` name each node's Ray and Python", [
        f"{CORE}::test_agents_come_up_by_themselves_and_status_reports_them",
        f"{CORE}::test_status_and_version_name_the_ray_and_python_of_the_client_and_each_agent"]),
    ("breakpoint in a task", [f"{CONTEXTS}::test_task_breakpoint_listed_attached_and_resumed"]),
    ("breakpoint in an actor method", [f"{CONTEXTS}::test_actor_method"]),
    ("breakpoint in a Ray Data UDF", [f"{CONTEXTS}::test_ray_data_function_udf"]),
    ("breakpoint in a Ray Train rank (generic backend)", [
        f"{CONTEXTS}::test_ray_train_rank0_breakpoint_without_torch"]),
    ("breakpoint in a Ray Train rank (torch backend)", [f"{CONTEXTS}::test_ray_train_rank0_breakpoint"]),
    ("post-mortem of a failed task", [f"{CONTEXTS}::test_post_mortem_in_task"]),
    ("memory: start gate holds later waves", [
        "tests/e2e/test_memory_e2e.py::test_later_waves_of_a_big_function_are_held_at_start_not_killed"]),
    ("memory: kill before the kernel's OOM killer", [
        "tests/e2e/test_memory_e2e.py::test_raydbg_kills_newest_retriable_task_before_the_kernel"]),
    ("memory budgets of named and Ray Data tasks", [
        f"{CORE}::test_the_monitor_knows_named_and_ray_data_tasks_and_their_budgets"]),
    ("trace span from driver to task and actor (OTLP)", [
        "tests/e2e/test_telemetry_otlp_ray.py::test_spans_cross_ray_task_boundary"]),
    ("`raydbg stacks` and the hang event of a stuck 2-rank Train run (generic backend)", [
        f"{E2E}/test_train_generic.py::test_stacks_and_the_hang_event_of_a_stuck_run_without_torch"]),
    ("`raydbg stacks` on a 2-rank Train run (torch backend, gloo)", [
        f"{E2E}/test_gang_stacks.py::test_stacks_name_the_odd_rank"]),
    ("hang event of a stuck Train run (torch backend, gloo)", [
        f"{E2E}/test_gang_train.py::test_hang_event_fires_once_for_a_stuck_run"]),
    ("armed breakpoints (`raydbg break add`)", [f"{E2E}/test_armed_breakpoints.py"]),
    ("armed breakpoints' layers (sys.monitoring on Python 3.12+, else sys.settrace)", [
        "tests/test_breakpoints_model.py", "tests/test_breakpoints_layers.py", "tests/test_breakpoints_store.py"]),
    ("`raydbg pause` of a Train rank in a Python loop, then a debugger attached (generic backend)", [
        f"{E2E}/test_pause.py::test_pause_a_rank_in_a_python_loop_then_continue"]),
    ("`raydbg pause`'s trace on one thread, a blocked thread's locals (sys.monitoring on 3.12+)", [
        "tests/test_pause_units.py"]),
    ("a step's wait for data in Ray Data's batch iterators (straggler events)", [
        f"{E2E}/test_train_generic.py::test_ray_datas_batch_iterators_count_as_waits_for_data"]),
    ("`ray job submit` with the user's worker_process_setup_hook and RAY_DEBUG=1", [
        f"{E2E}/test_job_submit.py::test_submitted_job_runs_the_users_setup_hook_and_raydbgs"]),
]


MAIN = "main"  # build/matrix/main.xml: the main suite's own run (.venv), when it wrote one

# What differs by Python alone (an entry on the main suite's Ray runs only these): the
# breakpoint hooks, the debugger and post-mortem, the tracer at exit (Python 3.12 starts no
# thread at exit), armed breakpoints (sys.monitoring from 3.12), the adapter's own tests.
BY_PYTHON = {
    "Ray adapter: task events, live actors, token auth, tracing proxy",
    "breakpoint in a task",
    "breakpoint in an actor method",
    "post-mortem of a failed task",
    "trace span from driver to task and actor (OTLP)",
    "armed breakpoints (`raydbg break add`)",
    "armed breakpoints' layers (sys.monitoring on Python 3.12+, else sys.settrace)",
    "`raydbg pause` of a Train rank in a Python loop, then a debugger attached (generic backend)",
    "`raydbg pause`'s trace on one thread, a blocked thread's locals (sys.monitoring on 3.12+)",
}


def node_ids(python_only: bool = False) -> list[str]:
    """The entry's node ids, those of one module together: pytest runs them in this order
    and tears a module's cluster (its module-scoped fixture) down as soon as the next id
    is in another module, so a module split in two would start its cluster twice."""
    by_module: dict[str, list[str]] = {}
    for feature, nodes in FEATURES:
        if not python_only or feature in BY_PYTHON:
            for node in nodes:
                by_module.setdefault(node.split("::")[0], []).append(node)
    return [node for nodes in by_module.values() for node in nodes]


def versions() -> dict[str, str]:
    import platform
    from importlib import metadata

    return {"ray": metadata.version("ray"), "python": platform.python_version()}


def _outcomes(xml: Path) -> dict[str, tuple[str, str]]:
    """'path::name' (no parameters) -> (passed | failed | skipped, why), from pytest's JUnit XML."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        node = f"{path}::{case.get('name', '').split('[')[0]}"
        skipped = case.find("skipped")
        failed = case.find("failure") if case.find("failure") is not None else case.find("error")
        state = ("failed", "") if failed is not None else (
            ("skipped", skipped.get("message", "")) if skipped is not None else ("passed", ""))
        if out.get(node, ("passed", ""))[0] == "passed":  # a parameter that failed decides
            out[node] = state
    return out


def _cell(nodes: list[str], outcomes: dict[str, tuple[str, str]], notes: list[str]) -> str:
    found = [v for node, v in outcomes.items() if any(node == n or node.startswith(n + "::") for n in nodes)]
    if not found:
        return "not run"
    if any(state == "failed" for state, _ in found):
        return "**fails**"
    skipped = [why.removeprefix("Skipped: ") for state, why in found if state == "skipped"]
    refs = []
    for why in dict.fromkeys(skipped):
        if why not in notes:
            notes.append(why)
        refs.append(f"[{notes.index(why) + 1}]")
    if len(skipped) == len(found):
        return "not tested " + " ".join(refs)
    return "yes" + (f" (some cases not run: {' '.join(refs)})" if refs else "")


def render(results: Path) -> str:
    # An entry is NAME.json with NAME.xml, or with NAME-<part>.xml for a run in parts (`make
    # test` runs the main suite's end-to-end tests and the rest side by side).
    parts: dict[str, list[Path]] = {}
    for xml in sorted(results.glob("*.xml")):
        parts.setdefault(xml.stem.split("-", 1)[0] if xml.stem.startswith(MAIN + "-") else xml.stem, []).append(xml)
    entries = []
    for name, xmls in sorted(parts.items()):
        info = json.loads((results / f"{name}.json").read_text())
        main = " (main suite)" if name == MAIN else ""
        outcomes = {node: state for xml in xmls for node, state in _outcomes(xml).items()}
        entries.append((f"Ray {info['ray']}, Python {info['python']}{main}", outcomes))
    notes: list[str] = []
    rows = [f"| {feature} | " + " | ".join(_cell(nodes, o, notes) for _, o in entries) + " |"
            for feature, nodes in FEATURES]
    head = "| feature | " + " | ".join(name for name, _ in entries) + " |"
    lines = [
        "# Supported Ray and Python versions",
        "",
        "<!-- Generated by tests/version_matrix.py from the version matrix's results: do not edit. -->",
        "",
        "raydbg supports Ray 2.51.0 to 2.60.x (`ray[default]>=2.51,<2.61`) on Python 3.10 to 3.13.",
        "On another Ray it says so in one line and stays off: `breakpoint()` then goes to Ray's",
        "own debugger. The main suite runs on Python 3.11 with Ray 2.60.0; this table is what each",
        "entry of the version matrix (`make test`, alongside the main suite) ran, each in a light",
        "venv (raydbg without the SD extra), running the tests that touch Ray internals or",
        "differ by version (`tests/version_matrix.py` names them); an entry on the main suite's",
        "Ray (2.60) runs only what differs by Python, the rest is the main suite's column. The torch-backend Train rows",
        "run in the main suite (CPU torch 2.13 exists for Python 3.11 only); `make test` adds its",
        "column.",
        "",
        head,
        "|" + "---|" * (len(entries) + 1),
        *rows,
        "",
    ]
    lines += [f"[{i}] {why}" + "  " for i, why in enumerate(notes, 1)]
    lines += [
        "",
        "Where a feature needs something a version lacks, `raydbg status` says so in one line",
        "(on Ray 2.51: `Ray token auth: not in Ray 2.51.x, raydbg's own token in use`; Ray's",
        "token authentication starts at 2.52).",
        "",
        "Regenerate: `make test` (the main suite's column and the matrix), or `make test-matrix`",
        "(the matrix only; `MATRIX=ray251-py310` for one entry), which write `build/matrix/` and",
        "render this page with `python tests/version_matrix.py render build/matrix > docs/support.md`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["ids"]:
        print("\n".join(node_ids(python_only=argv[1:] == ["--python-only"])))
    elif argv[:1] == ["versions"]:
        print(json.dumps(versions()))
    elif argv[:1] == ["render"] and len(argv) == 2:
        sys.stdout.write(render(Path(argv[1])))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
