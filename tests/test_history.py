"""A job's durable record without Ray: writer and reader (torn tails, a store that goes down, the
bounded buffer), `raydbg history` (text, --json, no Ray import), the HTML report (escaping, a real
browser), and another local user against the private default place."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from other_user import as_other_user, can_be_other_user

from raydbg.history import html, lifecycle, reader, store, view, writer

ROOT = Path(__file__).resolve().parents[1]
JOB = "02000000"
EVIL = "<script>alert('x')</script>\"><img src=x onerror=alert(1)>"


def _fill(w: writer.HistoryWriter, t: float, job: str = JOB) -> None:
    """A small run: versions, 3 ranks' steps (rank 2 slow), an attempt, a hang, a kill, memory."""
    w.add(job, "job", {"raydbg": "0.0", "ray": "2.60.0", "python": "3.12"}, t)
    for i in range(30):
        for rank in range(3):
            w.add(job, "steps", {"train_run": "nightly", "world_rank": rank, "step": i,
                                 "busy_s": 0.1 + (0.5 if rank == 2 else 0.0)}, t + i)
    w.add(job, "attempt", {"run": "nightly", "run_id": "r1", "number": 1, "status": "ERRORED", "started": t,
                           "ended": t + 29, "duration_s": 29.0, "error": "RuntimeError: boom",
                           "failed": [{"world_rank": 2, "node_ip": "10.0.0.2", "node_id": "ab", "error": "RuntimeError: boom"}],
                           "workers": [], "run_status": "ERRORED"}, t + 29)
    w.add(job, "event", {"id": "0000aaaa", "ts": t + 20, "kind": "hang", "node_id": "",
                         "message": f"run nightly made no progress {EVIL}",
                         "details": {"chain": ["ranks 0,1 wait in all_reduce #5 (world) for 2", "rank 2 is in load"],
                                     "culprits": [{"world_rank": 2, "pid": 7, "stack_class": {
                                         "summary": f"load {EVIL}", "frames": [{"function": EVIL, "file": "t.py", "line": 3}]}}],
                                     "classes": [{"count": 2, "total": 3, "summary": "all_reduce", "frames": []}]}}, t + 20)
    w.add(job, "event", {"id": "0000bbbb", "ts": t + 25, "kind": "memory.kill", "node_id": "n1",
                         "message": "killed task f (pid 9)", "details": {"decision": "newest retriable first"}}, t + 25)
    for k in range(5):
        w.add(job, "memory", {"node_id": "n1", "used": (2 + k) << 30, "limit": 8 << 30}, t + 6 * k)


def test_writer_and_reader_round_trip_with_the_live_commands_text(tmp_path: Path) -> None:
    s = store.open_store(str(tmp_path / "h"))
    w = writer.HistoryWriter(s)
    t = time.time() - 60
    _fill(w, t)
    assert w.flush() and w.pending() == 0
    (listed,) = reader.jobs(s)
    assert listed["job_id"] == JOB and listed["runs"] == ["nightly"] and listed["counts"]["steps"] == 90
    assert reader.resolve(s, "nightly") == JOB and reader.resolve(s, "0200") == JOB
    with pytest.raises(store.StoreError, match="no job or run 'nope'"):
        reader.resolve(s, "nope")
    text = view.render(view.build(reader.load(s, JOB)))
    assert "attempt 1" in text and "ERRORED  rank 2 on 10.0.0.2 (node ab): RuntimeError: boom" in text
    assert "hang" in text and "ranks 0,1 wait in all_reduce #5 (world) for 2" in text
    assert "memory.kill" in text and "newest retriable first" in text
    assert "rank    2  steps to     29  median 0.600" in text and "<- slowest" in text
    # Files: 0700 folder, 0600 files.
    job_dir = tmp_path / "h" / JOB
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in job_dir.iterdir())


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = ("import sys; from raydbg.cli import main; rc = main(sys.argv[1:]); "
            "assert 'ray' not in sys.modules, 'ray imported'; sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_history_cli_lists_shows_and_round_trips_json_without_ray(tmp_path: Path) -> None:
    s = store.open_store(str(tmp_path / "h"))
    w = writer.HistoryWriter(s)
    _fill(w, time.time() - 60)
    _fill(w, time.time() - 30, job="03000000")
    w.flush()
    out = _cli("history", str(tmp_path / "h"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.index("03000000") < out.stdout.index(JOB)  # newest first
    out = _cli("history", "show", JOB, "--json", env={"RAYDBG_HISTORY": str(tmp_path / "h")})
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown == json.loads(json.dumps(view.build(reader.load(s, JOB))))  # --json round-trips the view
    assert [e["kind"] for e in shown["events"]] == ["hang", "memory.kill"]
    out = _cli("history", "show", "--json", JOB, str(tmp_path / "h"))  # options before the words too
    assert out.returncode == 0 and json.loads(out.stdout) == shown, out.stderr
    out = _cli("history", "show", JOB, "--nope")
    assert out.returncode == 2 and "unrecognized arguments: --nope" in out.stderr
    out = _cli("history", "show", "nope", str(tmp_path / "h"))
    assert out.returncode == 1 and out.stderr.startswith("raydbg: raydbg history: no job or run 'nope'"), out.stderr
    assert "Traceback" not in out.stderr


def test_a_writer_killed_mid_write_loses_at_most_the_line_in_flight(tmp_path: Path) -> None:
    root = tmp_path / "h"
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
            "from raydbg.history import store, writer\n"
            f"w = writer.HistoryWriter(store.open_store({str(root)!r}), segment_max=1 << 30)\n"
            "big = 'x' * (8 << 20)\n"
            "i = 0\n"
            "while True:\n"
            "    w.add('04000000', 'gap', {'dropped': i, 'pad': big}); w.flush(); i += 1\n"
            "    if i == 3: print('ready', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    s = store.open_store(str(root))
    record = reader.load(s, "04000000")
    got = [e["data"]["dropped"] for e in record["entries"]]
    assert len(got) >= 3 and got == list(range(len(got)))  # every complete line, in order
    assert record["skipped_lines"] <= 1
    # A torn tail for certain: cut the segment inside its last line.
    (seg,) = [p for p in (root / "04000000").iterdir() if p.name.startswith("seg-")]
    data = seg.read_bytes()
    seg.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 100])
    record = reader.load(s, "04000000")
    assert record["skipped_lines"] == 1 and len(record["entries"]) == data.rstrip(b"\n").count(b"\n")


def test_bounded_buffer_drops_and_says_so_once_the_store_is_back(tmp_path: Path) -> None:
    class Down:
        where = "down://"
        up = False
        inner = store.open_store(str(tmp_path / "h"))

        def __getattr__(self, name: str) -> Any:
            if not self.up and name in ("append", "replace"):
                raise OSError("store down")
            return getattr(self.inner, name)

    s = Down()
    w = writer.HistoryWriter(s, max_pending=5)  # type: ignore[arg-type]
    accepted = [w.add(JOB, "memory", {"node_id": "n", "used": i, "limit": 10}) for i in range(8)]
    assert accepted == [True] * 5 + [False] * 3
    assert not w.flush()
    line = writer.status_line(w.state())
    assert line.startswith("history: down:// unreachable for") and "6 entries waiting, 3 dropped" in line, line  # the gap note waits too
    s.up = True
    assert w.flush()
    record = reader.load(s.inner, JOB)
    assert [e["data"]["used"] for e in record["entries"] if e["kind"] == "memory"] == [0, 1, 2, 3, 4]
    assert view.build(record)["dropped"] == 3


def _free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return int(sk.getsockname()[1])


def test_an_s3_store_down_for_a_while_loses_nothing_once_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer
    from s3_server import ENV

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="hist")
        uri = f"s3://hist/runs?endpoint_override=127.0.0.1:{port}&scheme=http"
        s = store.open_store(uri)
        w = writer.HistoryWriter(s)
        for i in range(10):
            w.add(JOB, "memory", {"node_id": "n", "used": i, "limit": 100})
        assert w.flush(), w.state()
        server.stop()
        for i in range(10, 20):
            w.add(JOB, "memory", {"node_id": "n", "used": i, "limit": 100})
        assert not w.flush() and w.pending() == 10
        assert "unreachable" in writer.status_line(w.state())
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()  # moto keeps its buckets in this process: the same store, back
        assert w.flush(), w.state()
        record = reader.load(store.open_store(uri), JOB)
        assert [e["data"]["used"] for e in record["entries"]] == list(range(20))
        assert reader.jobs(store.open_store(uri))[0]["counts"] == {"memory": 20}
    finally:
        server.stop()


def test_session_lifecycle_keeps_who_and_where_never_locals() -> None:
    rec = {"id": "a" * 12, "job_id": JOB, "pid": 5, "file": "t.py", "line": 3, "function": "f", "reason": "breakpoint",
           "since": 100.0, "state": "waiting", "train_rank": 1, "task_name": "train",
           "frames": [{"function": "f", "locals": {"secret": "'hunter2'"}}], "socket": "/tmp/x"}
    paused = lifecycle.changes({}, {rec["id"]: rec}, 101.0)
    assert [e["kind"] for e in paused] == ["session.paused"]
    assert paused[0]["message"] == "train [rank 1] paused at t.py:3 in f (breakpoint)"
    attached = lifecycle.changes({rec["id"]: rec}, {rec["id"]: dict(rec, state="attached")}, 102.0)
    assert [e["kind"] for e in attached] == ["session.attached"]
    gone = lifecycle.changes({rec["id"]: rec}, {}, 130.0)
    assert gone[0]["kind"] == "session.continued" and gone[0]["details"]["paused_s"] == 30.0
    for e in paused + attached + gone:
        assert "hunter2" not in json.dumps(e) and "socket" not in e["details"] and "frames" not in e["details"]


def _view(tmp_path: Path) -> dict[str, Any]:
    s = store.open_store(str(tmp_path / "h"))
    w = writer.HistoryWriter(s)
    _fill(w, time.time() - 60)
    w.flush()
    return view.build(reader.load(s, JOB))


def test_the_report_escapes_every_string_from_the_record(tmp_path: Path) -> None:
    page = html.render(_view(tmp_path))
    assert "<script" not in page and "<img" not in page and "onerror=alert(1)>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "default-src 'none'" in page  # and nothing would run even if a string slipped through
    assert "http://" not in page.replace("http-equiv", "") and "https://" not in page  # nothing fetched


def _png_colours(png: bytes) -> set[bytes]:
    """The distinct pixels of an 8-bit RGB(A) PNG (no PIL needed)."""
    pos, chunks, ihdr = 8, b"", b""
    while pos < len(png):
        n = int.from_bytes(png[pos:pos + 4], "big")
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        ihdr = body if kind == b"IHDR" else ihdr
        chunks += body if kind == b"IDAT" else b""
        pos += 12 + n
    width, depth, colour = int.from_bytes(ihdr[:4], "big"), ihdr[8], ihdr[9]
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(chunks)
    stride = width * bpp + 1
    # Only unfiltered bytes are compared: a few rows' filter-0 data, or the raw bytes otherwise.
    return {raw[i + 1:i + 1 + width * bpp] for i in range(0, len(raw), stride)}


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium (apt-get install -y chromium)")
def test_the_report_renders_in_a_real_browser(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text(html.render(_view(tmp_path)))
    base = ["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'id="timeline"' in dom.stdout and 'class="heatmap"' in dom.stdout and dom.stdout.count('class="cell"') >= 3
    assert 'class="chain"' in dom.stdout and "event-mark" in dom.stdout
    shot = tmp_path / "shot.png"
    run = subprocess.run([*base, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", "--window-size=1100,1400",
                          out.as_uri()], capture_output=True, text=True, timeout=120)
    console = [ln for ln in run.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln or "Content Security" in ln]
    assert console == [], console
    png = shot.read_bytes()
    try:
        from PIL import Image

        colours = len(Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 24) or [])
    except ImportError:
        colours = len(_png_colours(png))
    assert colours > 10, "the screenshot is blank"


@can_be_other_user
def test_another_user_cannot_read_plant_or_swap_in_the_default_place(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(home, 0o755)  # a home others may traverse, as many are
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RAYDBG_HISTORY", raising=False)
    s = store.open_store()
    w = writer.HistoryWriter(s)
    _fill(w, time.time() - 60)
    assert w.flush(), w.state()
    job_dir = home / ".raydbg" / "history" / JOB
    seg = next(p for p in job_dir.iterdir() if p.name.startswith("seg-"))

    def read() -> str:
        try:
            return seg.read_text()[:10]
        except PermissionError:
            return "denied"

    def plant() -> str:
        try:
            (job_dir / "seg-0000000000000-00000000-0001.jsonl").write_text('{"ts":1,"kind":"gap"}\n')
            return "planted"
        except PermissionError:
            return "denied"

    def listing() -> str:
        try:
            return str(os.listdir(home / ".raydbg" / "history"))
        except PermissionError:
            return "denied"

    assert as_other_user(read) == "denied"
    assert as_other_user(plant) == "denied"
    assert as_other_user(listing) == "denied"
    # Made by someone else before us: refused, in one line, and the writer says so.
    (home / ".raydbg" / "history").rename(tmp_path / "ours")
    other = home / ".raydbg" / "history"
    other.mkdir(mode=0o777)
    os.chown(other, 65534, 65534)
    w.add(JOB, "memory", {"node_id": "n", "used": 1, "limit": 2})
    assert not w.flush()
    assert "belongs to uid 65534" in str(w.state()["error"])
    with pytest.raises(OSError, match="belongs to uid 65534"):
        store.open_store().jobs()
    # A job folder swapped for a symlink to another user's files: not read.
    other.rmdir()
    (tmp_path / "ours").rename(other)
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (other / "05000000").symlink_to(victim)
    assert [m["job_id"] for m in reader.jobs(store.open_store())] == [JOB]
    with pytest.raises(OSError, match="not a plain directory"):
        reader.load(store.open_store(), "05000000")


def test_the_same_job_id_in_two_clusters_is_two_records_newest_first(tmp_path: Path) -> None:
    s = store.open_store(str(tmp_path / "h"))
    w = writer.HistoryWriter(s)
    w.add("01000000", "memory", {"node_id": "n", "used": 1, "limit": 2}, time.time() - 100, record="01000000-day1")
    w.add("01000000", "memory", {"node_id": "n", "used": 5, "limit": 6}, time.time() - 10, record="01000000-day2")
    assert w.flush()
    assert [(m["record"], m["job_id"]) for m in reader.jobs(s)] == [("01000000-day2", "01000000"),
                                                                     ("01000000-day1", "01000000")]
    assert reader.resolve(s, "01000000") == "01000000-day2" and reader.resolve(s, "01000000-day1") == "01000000-day1"


async def test_the_tui_shows_a_record_read_only(tmp_path: Path) -> None:
    from tui_support import until

    from raydbg.tui.app import create_app
    from raydbg.tui.events import EventDetail, EventsPane
    from raydbg.tui.history_gateway import READ_ONLY, HistoryGateway

    v = _view(tmp_path)
    v["nodes"] = [{"node_id": "n1", "node_ip": "10.0.0.1", "is_head": True}]
    gw = HistoryGateway(v)
    app = create_app(gw, refresh=0.05)
    async with app.run_test(size=(120, 30)) as pilot:
        events = app.screen.query_one(EventsPane)
        await until(pilot, lambda: events.row_count == 2)
        assert [events.get_row_at(i)[1] for i in range(2)] == ["memory.kill", "hang"]  # newest first
        events.focus()
        await pilot.press("enter")
        assert isinstance(app.screen, EventDetail)
    assert (await gw.nodes())[0]["memory"] == {"used": 6 << 30, "limit": 8 << 30}
    with pytest.raises(Exception, match="read-only"):
        await gw.connect_dap("x")
    assert READ_ONLY.startswith("a record is read-only")


def test_spans_tailed_from_the_telemetry_files_give_the_live_goodput_table(tmp_path: Path) -> None:
    from raydbg.history.spans import SpanTail
    from raydbg.telemetry import goodput

    def span(name: str, a: float, b: float, **attrs: Any) -> dict[str, Any]:
        return {"type": "span", "name": name, "start": a, "end": b, "duration": b - a, "status": "OK",
                "attributes": {"train.run.id": "r9", "ray.train.world_rank": 0, **attrs}}

    tel = tmp_path / "telemetry"
    tel.mkdir(mode=0o700)
    lines = [{"type": "resource", "attributes": {"process.pid": 10}}, span("t.run", 0, 10), span("t.setup", 0, 1),
             {"type": "span", "name": "other", "start": 0, "end": 1, "attributes": {}}]
    lines += [span("t.step", 1 + i, 2 + i, **{"train.step": i}) for i in range(8)]
    text = "".join(json.dumps(x) + "\n" for x in lines)
    f = tel / "worker-10.jsonl"
    f.write_text(text[:-30])  # the last line still being written
    tail = SpanTail(str(tel))
    first = tail.new_spans()
    assert len(first) == 9 and all(s["resource"] == {"process.pid": 10} for s in first)
    with open(f, "a") as out:
        out.write(text[-30:])
    got = first + tail.new_spans()
    assert len(got) == 10 and tail.new_spans() == []
    s = store.open_store(str(tmp_path / "h"))
    w = writer.HistoryWriter(s)
    for sp in got:
        w.add(JOB, "span", sp, sp["end"])
    w.flush()
    (g,) = view.build(reader.load(s, JOB))["goodput"]
    assert g["table"] == goodput.table(goodput.compute(goodput.select(got, "r9"), "r9"))  # as `raydbg goodput`
    assert g["table"] in view.render(view.build(reader.load(s, JOB)))


def test_the_size_benchmark_runs() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "history_cost.py"), "--ranks", "8", "--hours", "0.02"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert "MiB per hour" in out.stdout and "steps" in out.stdout, out.stdout


def test_an_entry_of_the_wrong_shape_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    s = store.open_store(str(tmp_path / "h"))
    w = writer.HistoryWriter(s)
    w.add(JOB, "attempt", {"run": "x", "number": 1, "started": "yesterday", "ended": None, "failed": "?"})
    w.add(JOB, "steps", {"train_run": "x", "world_rank": 0, "busy_s": "slow"})
    w.flush()
    for args in (("show", JOB), ("report", JOB, "--html", str(tmp_path / "r.html"))):
        out = _cli("history", *args, "--from", str(tmp_path / "h"))
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith("raydbg: history: the record holds an entry raydbg cannot read"), out.stderr


@pytest.mark.parametrize("value", ["off", "OFF", "0", "none", "false"])
def test_history_off_starts_no_recorder_on_the_gateway(value: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """RAYDBG_HISTORY=off: the gateway records nothing (benchmarks/history_job_cost.py's `off`)."""
    from types import SimpleNamespace

    from aiohttp import web

    from raydbg.agent_host import history_recorder

    def hooks(history: str, is_head: bool = True) -> int:
        monkeypatch.setenv("RAYDBG_HISTORY", history)
        app = web.Application()
        before = len(app.on_startup)  # aiohttp's own (cleanup_ctx) is there already
        history_recorder.register(SimpleNamespace(is_head=is_head), app)  # type: ignore[arg-type]
        return len(app.on_startup) - before

    assert hooks(str(tmp_path / "h")) == 1  # on: the recorder starts with the gateway
    assert hooks(str(tmp_path / "h"), is_head=False) == 0  # another node's agent: never
    assert hooks(value) == 0
