"""A job's record as one self-contained HTML page (pure; runs in `raydbg history report`).

Inline CSS and SVG, no script and nothing fetched: it opens anywhere, offline. Every text
from the record (frame names, messages, run names: they come from user code) goes through
`esc` or `attr`; numbers are formatted by us. Sections: a timeline of attempts, pauses,
hangs, stragglers and kills; per-rank step times as a heatmap; each hang's wait-for chain
and stack classes; goodput; each node's memory.
"""

from __future__ import annotations

import html
import statistics
import time
from typing import Any

W = 960  # drawing width, px
LANE = 22
MAX_EVENT_ROWS = 500
MAX_FRAMES = 12
COLORS = {"FINISHED": "#3a7", "RUNNING": "#59d", "ERRORED": "#d54", "ABORTED": "#d94", "pause": "#97c",
          "hang": "#c33", "straggler": "#e90", "memory.kill": "#a0a", "memory.dry-run": "#c8c", "other": "#888"}

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}.muted{color:#777}
svg text{font:11px system-ui,sans-serif}.legend span{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}
"""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _clock(ts: float | None) -> str:
    return "?" if ts is None else time.strftime("%H:%M:%S", time.localtime(ts))


def _x(ts: float, t0: float, t1: float, left: int = 120) -> float:
    span = max(t1 - t0, 1e-6)
    return left + (W - left - 10) * (min(max(ts, t0), t1) - t0) / span


def _rect(x0: float, x1: float, y: float, h: float, color: str, tip: str) -> str:
    return (f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 2):.1f}" height="{h:.1f}" fill="{color}">'
            f"<title>{esc(tip)}</title></rect>")


def _mark(x: float, y: float, color: str, tip: str) -> str:
    return (f'<path d="M{x:.1f} {y:.1f} l5 9 h-10 z" fill="{color}" class="event-mark">'
            f"<title>{esc(tip)}</title></path>")


def _pauses(events: list[dict[str, Any]], end: float) -> list[tuple[float, float, str]]:
    """(start, end, what) of each pause, from its session.paused and session.continued events."""
    started: dict[str, dict[str, Any]] = {}
    out = []
    for ev in events:
        sid = str((ev.get("details") or {}).get("session"))
        if ev.get("kind") == "session.paused":
            started[sid] = ev
        elif ev.get("kind") == "session.continued" and sid in started:
            out.append((started.pop(sid)["ts"], ev["ts"], str(ev.get("message"))))
    out += [(ev["ts"], end, f"{ev.get('message')} (still paused when the record ends)") for ev in started.values()]
    return out


def timeline(v: dict[str, Any]) -> str:
    t0, t1 = v["first_ts"] or 0.0, v["last_ts"] or 1.0
    lanes: list[tuple[str, list[str]]] = []
    for run in v["train_runs"]:
        shapes = [_rect(_x(a.get("started") or t0, t0, t1), _x(a.get("ended") or t1, t0, t1), 0, LANE - 6,
                        COLORS.get(str(a.get("status")), COLORS["other"]),
                        f"attempt {a.get('number')}: {a.get('status')} {a.get('error') or ''}")
                  for a in run["attempts"]]
        lanes.append((f"run {run.get('run')}", shapes))
    pauses = [_rect(_x(s, t0, t1), _x(e, t0, t1), 0, LANE - 6, COLORS["pause"], what)
              for s, e, what in _pauses(v["events"], t1)]
    lanes.append(("pauses", pauses))
    for kind in ("hang", "straggler", "memory.kill"):
        evs = [e for e in v["events"] if e.get("kind") == kind]
        lanes.append((kind, [_mark(_x(e["ts"], t0, t1), 0, COLORS[kind], f"{_clock(e['ts'])} {e.get('message')}")
                             for e in evs]))
    rows = []
    for i, (label, shapes) in enumerate(lanes):
        y = 20 + i * LANE
        rows.append(f'<text x="4" y="{y + 12}">{esc(label[:18])}</text>'
                    f'<g transform="translate(0,{y})" class="lane">{"".join(shapes)}</g>')
    h = 30 + len(lanes) * LANE
    axis = "".join(f'<text x="{_x(t0 + (t1 - t0) * k / 4, t0, t1):.1f}" y="12" '
                   f'text-anchor="{"end" if k == 4 else "middle"}">{_clock(t0 + (t1 - t0) * k / 4)}</text>'
                   for k in range(5))
    return (f'<svg id="timeline" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" '
            f'aria-label="timeline">{axis}{"".join(rows)}</svg>')


def heatmap(n: int, run: str, ranks: dict[str, list[list[float]]], t0: float, t1: float) -> str:
    """Rows: ranks; columns: time; colour: step time against the run's slowest (the straggler is the dark row)."""
    cols = 60
    top = max((p[2] for pts in ranks.values() for p in pts), default=0.0) or 1.0
    order = sorted(ranks, key=lambda r: int(r) if r.isdigit() else 0)
    cell_w = (W - 130) / cols
    cells = []
    for i, rank in enumerate(order):
        buckets: dict[int, list[float]] = {}
        for ts, _step, busy in ranks[rank]:
            buckets.setdefault(min(cols - 1, int((ts - t0) / max(t1 - t0, 1e-6) * cols)), []).append(busy)
        y = 18 + i * 14
        cells.append(f'<text x="4" y="{y + 10}">rank {esc(rank)}</text>')
        for col, vals in buckets.items():
            med = statistics.median(vals)
            light = 95 - int(60 * min(med / top, 1.0))
            cells.append(f'<rect class="cell" x="{120 + col * cell_w:.1f}" y="{y}" width="{cell_w:.1f}" height="12" '
                         f'fill="hsl(20,85%,{light}%)"><title>rank {esc(rank)}: {med:.3f}s per step '
                         f"at {_clock(t0 + (col + .5) * (t1 - t0) / cols)}</title></rect>")
    h = 24 + len(order) * 14
    return (f"<h3>Train run {esc(run)}</h3><svg class=\"heatmap\" id=\"heatmap-{n}\" "
            f'width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" aria-label="step times">'
            f'{"".join(cells)}</svg><p class="muted">darker: longer steps (slowest median {top:.3f}s)</p>')


def memory_chart(node: str, pts: list[list[float]], t0: float, t1: float) -> str:
    h = 80
    line = " ".join(f"{_x(ts, t0, t1):.1f},{h - 10 - (h - 20) * (used / limit if limit else 0):.1f}"
                    for ts, used, limit in pts)
    return (f'<svg class="memory" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img" aria-label="memory">'
            f'<text x="4" y="20">node {esc(node[:12])}</text><line x1="120" x2="{W - 10}" y1="10" y2="10" stroke="#d54" '
            f'stroke-dasharray="4"/><polyline points="{line}" fill="none" stroke="#59d" stroke-width="2"/></svg>')


def _frames(frames: list[dict[str, Any]]) -> str:
    lines = [f"{f.get('function', '?')}  {f.get('file', '')}:{f.get('line', '')}" for f in frames[:MAX_FRAMES]]
    return "<pre>" + esc("\n".join(lines)) + "</pre>"


def hang_section(ev: dict[str, Any]) -> str:
    d = ev.get("details") or {}
    out = [f"<h3>{esc(_clock(ev.get('ts')))} {esc(ev.get('message'))}</h3>"]
    if d.get("chain"):
        out.append('<p>Wait-for chain</p><pre class="chain">' + esc("\n".join(map(str, d["chain"]))) + "</pre>")
    for c in d.get("culprits") or []:
        klass = c.get("stack_class") or {}
        out.append(f"<p>culprit rank {esc(c.get('world_rank'))} (pid {esc(c.get('pid'))}): {esc(klass.get('summary'))}</p>"
                   + _frames(klass.get("frames") or []))
    for c in d.get("classes") or []:
        out.append(f"<details><summary>{esc(c.get('count'))}/{esc(c.get('total'))} {esc(c.get('summary'))}</summary>"
                   f"{_frames(c.get('frames') or [])}</details>")
    return "".join(out)


def goodput_section(g: dict[str, Any]) -> str:
    if "error" in g:
        return f"<p>run {esc(g['run'])}: not computed ({esc(g['error'])})</p>"
    parts = {k: s for k, s in (g.get("parts_s") or {}).items() if s}
    wall = sum(parts.values()) or 1.0
    x, bars = 0.0, []
    palette = ["#3a7", "#59d", "#e90", "#d54", "#97c", "#888", "#a0a", "#6cc"]
    for i, (k, s) in enumerate(parts.items()):
        w = (W - 20) * s / wall
        bars.append(_rect(x, x + w, 0, 20, palette[i % len(palette)], f"{k}: {s:.2f}s ({s / wall:.1%})"))
        x += w
    return (f"<p>run {esc(g['run'])}: goodput {g.get('goodput', 0):.1%} of {g.get('wall_s', 0):.1f}s</p>"
            f'<svg class="goodput" width="{W}" height="24">{"".join(bars)}</svg><pre>{esc(g.get("table", ""))}</pre>')


def render(v: dict[str, Any]) -> str:
    """The whole page for the view `v` (raydbg/history/view.build)."""
    t0, t1 = v["first_ts"] or 0.0, v["last_ts"] or 1.0
    j = v["job"]
    body = [f"<h1>raydbg record of job {esc(v['job_id'])}</h1>",
            f"<p>{esc(_clock(v['first_ts']))} .. {esc(_clock(v['last_ts']))} "
            f"({time.strftime('%Y-%m-%d', time.localtime(t0))}); raydbg {esc(j.get('raydbg', '?'))}, "
            f"ray {esc(j.get('ray', '?'))}, python {esc(j.get('python', '?'))}; from {esc(v['where'])}</p>",
            "<h2>Timeline</h2>", timeline(v),
            '<p class="legend">' + "".join(f'<span style="background:{c}"></span>{esc(k)}' for k, c in COLORS.items())
            + "</p>"]
    if v["train_runs"]:
        body.append("<h2>Train attempts</h2><table><tr><th>run</th><th>#</th><th>status</th><th>start</th>"
                    "<th>end</th><th>failed</th><th>error</th></tr>")
        for r in v["train_runs"]:
            for a in r["attempts"]:
                failed = ", ".join(f"rank {f.get('world_rank')} on {f.get('node_ip')}" for f in a.get("failed") or [])
                body.append(f"<tr><td>{esc(r.get('run'))}</td><td>{esc(a.get('number'))}</td><td>{esc(a.get('status'))}"
                            f"</td><td>{_clock(a.get('started'))}</td><td>{_clock(a.get('ended'))}</td>"
                            f"<td>{esc(failed)}</td><td>{esc(a.get('error') or '')}</td></tr>")
        body.append("</table>")
    body.append("<h2>Step times per rank</h2>")
    body += [heatmap(i, run, ranks, t0, t1) for i, (run, ranks) in enumerate(v["steps"].items())] or ["<p class=muted>none recorded</p>"]
    hangs = [e for e in v["events"] if e.get("kind") == "hang"]
    body.append("<h2>Hangs</h2>")
    body += [hang_section(e) for e in hangs] or ["<p class=muted>none</p>"]
    body.append("<h2>Goodput</h2>")
    body += [goodput_section(g) for g in v["goodput"]] or ["<p class=muted>no training spans recorded</p>"]
    body.append("<h2>Memory</h2>")
    body += [memory_chart(n, pts, t0, t1) for n, pts in v["memory"].items()] or ["<p class=muted>none recorded</p>"]
    body.append(f"<h2>Events ({len(v['events'])})</h2><table id=\"events\">")
    for e in v["events"][:MAX_EVENT_ROWS]:
        extra = (e.get("details") or {}).get("decision") or ""
        body.append(f"<tr><td>{_clock(e.get('ts'))}</td><td>{esc(e.get('kind'))}</td><td>{esc(e.get('message'))}"
                    + (f"<br><span class=muted>{esc(extra)}</span>" if extra else "") + "</td></tr>")
    body.append("</table>")
    if v["dropped"] or v["skipped_lines"]:
        body.append(f"<p class=muted>{v['dropped']} entries dropped by the writer; {v['skipped_lines']} torn or "
                    "unreadable lines skipped</p>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>raydbg job {esc(v['job_id'])}</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
