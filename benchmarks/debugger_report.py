"""The debugger benchmark's report: its results as a table (rich) and as Markdown."""

from __future__ import annotations

from typing import Any

from debugger_common import ENV_CONTROL


def _f(med: dict[str, float], key: str, unit: str = " ms", digits: int = 0) -> str:
    return f"{med[key]:,.{digits}f}{unit}" if key in med else "-"


def rows(res: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(measure, raydbg, Ray built-in or plain Ray, target, met) rows of the report."""
    med, ratios, checks = res["medians"], res["ratios"], res["checks"]

    def met(name: str) -> str:
        return "yes" if checks.get(name) else "NO"

    def r(key: str) -> str:
        return f"{ratios[key]:.4f}" if ratios[key] == ratios[key] else "-"

    n = res["config"]["tasks"]
    builtin_never = "never" if med.get("tracer_left.builtin") == 1.0 else "-"
    return [
        (f"throughput, {n:,} no-op tasks", _f(med, "throughput.raydbg", " /s"),
         _f(med, "throughput.plain", " /s") + " (plain Ray)", "", ""),
        ("  ratio raydbg / plain Ray", r("throughput"), "", ">= 0.98",
         "no, within A/A noise" if not checks["throughput"] and checks.get("throughput.within_aa_noise") else
         met("throughput")),
        ("  median of the rounds' ratios (95% interval)",
         f"{r('throughput.paired')} ({r('throughput.paired.ci_lo')}-{r('throughput.paired.ci_hi')})",
         "", "", ""),
        ("  A/A control: a 2nd plain driver / plain (same, paired, interval)",
         f"{r('throughput.control')}, {r('throughput.control.paired')} "
         f"({r('throughput.control.paired.ci_lo')}-{r('throughput.control.paired.ci_hi')})", "", "", ""),
        *[(f"  variant {v} ({', '.join(f'{k}={x}' for k, x in env.items())}) / plain (paired, interval)",
           f"{r(f'throughput.{v}')}, {r(f'throughput.{v}.paired')} "
           f"({r(f'throughput.{v}.paired.ci_lo')}-{r(f'throughput.{v}.paired.ci_hi')}); CPU {r(f'task_cpu.{v}')}",
           "", "", "") for v, env in res["config"].get("variants", {}).items()],
        *([("  plain Ray with a runtime_env (env_vars only) / plain (paired, interval)",
            f"{r(f'throughput.{ENV_CONTROL}')}, {r(f'throughput.{ENV_CONTROL}.paired')} "
            f"({r(f'throughput.{ENV_CONTROL}.paired.ci_lo')}-{r(f'throughput.{ENV_CONTROL}.paired.ci_hi')}); "
            f"CPU {r(f'task_cpu.{ENV_CONTROL}')}", "", "", ""),
           ("  ratio raydbg / plain Ray with a runtime_env (paired, interval)",
            f"{r(f'throughput.vs_{ENV_CONTROL}')}, {r(f'throughput.vs_{ENV_CONTROL}.paired')} "
            f"({r(f'throughput.vs_{ENV_CONTROL}.paired.ci_lo')}-{r(f'throughput.vs_{ENV_CONTROL}.paired.ci_hi')}); "
            f"CPU {r(f'task_cpu.vs_{ENV_CONTROL}')}", "", "", "")] if res["config"].get("env_control") else []),
        ("CPU time per task, driver + workers", _f(med, "task_cpu_us.raydbg", " us"),
         _f(med, "task_cpu_us.plain", " us") + " (plain Ray)", "", ""),
        ("  ratio raydbg / plain Ray", r("task_cpu"), "", "", ""),
        ("CPU time per task, all processes of the cluster", _f(med, "task_cpu_us.all.raydbg", " us"),
         _f(med, "task_cpu_us.all.plain", " us") + " (plain Ray)", "", ""),
        ("  ratio raydbg / plain Ray", r("task_cpu.all"), "", "", ""),
        ("CPU loop after a session, vs never-debugged: calls", r("cpu.calls.raydbg"), r("cpu.calls.builtin"),
         ">= 0.95", met("cpu.calls")),
        ("CPU loop after a session, vs never-debugged: loop", r("cpu.loop.raydbg"), r("cpu.loop.builtin"),
         ">= 0.95", met("cpu.loop")),
        ("never-debugged worker, raydbg job / plain Ray: calls, loop",
         f"{r('cpu.calls.idle')}, {r('cpu.loop.idle')}", "", "", ""),
        ("tracer removed after the client detached", _f(med, "tracer_gone_ms.raydbg"), builtin_never, "", ""),
        ("breakpoint() -> listed, cold worker", _f(med, "pause.raydbg.listed.cold"),
         _f(med, "pause.builtin.cold"), "<= 100 ms", met("pause.cold")),
        ("breakpoint() -> listed, warm worker", _f(med, "pause.raydbg.listed.warm"),
         _f(med, "pause.builtin.warm"), "<= 100 ms", met("pause.warm")),
        ("breakpoint() -> attachable, cold worker", _f(med, "pause.raydbg.attachable.cold"),
         _f(med, "pause.builtin.cold"), "", ""),
        ("breakpoint() -> attachable, warm worker", _f(med, "pause.raydbg.attachable.warm"),
         _f(med, "pause.builtin.warm"), "", ""),
        ("connect -> first stackTrace, all", _f(med, "attach_ms.raydbg"), _f(med, "attach_ms.builtin"),
         "<= 300 ms", met("attach")),
        ("  first attach to a worker (cold)", _f(med, "attach_ms.raydbg.cold"), _f(med, "attach_ms.builtin.cold"),
         "", ""),
        ("  second attach (warm)", _f(med, "attach_ms.raydbg.warm"), _f(med, "attach_ms.builtin.warm"), "", ""),
    ]


HEADERS = ("measure (medians)", "raydbg", "Ray built-in", "target", "met")


def print_table(res: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Debugger benchmark ({res['date']}, {res['duration_s']:.0f} s)", header_style="bold")
    for h in HEADERS:
        table.add_column(h, justify="left" if h.startswith("measure") else "right")
    for row in rows(res):
        table.add_row(*row, style="red" if row[4] == "NO" else None)
    console = Console()
    console.print(table)
    counts = {k: len(v) for k, v in res["samples"].items()}
    console.print(f"samples: {counts}", style="dim")
    for note in res["notes"]:
        console.print(f"note: {note}", style="yellow")


def markdown(res: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace(">=", "≥").replace("<=", "≤") for c in row) + " |" for row in rows(res)]
    return "\n".join(lines)
