"""The records defined once (raydbg/schema.py): round trips, refusals, writers, the generated copies (no Ray)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from doubles import FakeGcs

from raydbg import progress_records, registry, schema, schema_gen, validate
from raydbg.record_rules import TRAIN_NAMES

REPO = Path(__file__).resolve().parents[1]


def _session(**kw: object) -> schema.SessionRecord:
    base: dict[str, object] = dict(
        id="a1b2c3d4e5f6", job_id="01000000", pid=4242, thread_id=7, thread_name="MainThread",
        file="/job/train.py", line=12, function="step", reason="exception", node_id="ab" * 28,
        node_ip="10.0.0.2", train_run="sd", train_rank=3, train_local_rank=1, train_world_size=8,
        group="g1", breakpoint_id="bp-1", since=1700000000.25, state="waiting", cwd="/job",
        exception=schema.ExceptionInfo(type="ValueError", message="bad ü", traceback="Traceback ..."),
        frames=[schema.SnapshotFrame(function="step", file="/job/train.py", line=12, locals={"x": "1"}, user=True),
                schema.SnapshotFrame(function="<module>", file="/job/train.py", line=None)])
    base.update(kw)
    return schema.SessionRecord(**base)  # type: ignore[arg-type]


def test_a_session_record_round_trips_through_its_json() -> None:
    rec = _session()
    data = rec.to_json()
    assert msgspec.json.decode(data, type=schema.SessionRecord) == rec
    assert json.loads(data)["attachable"] is True  # derived from `state` when written
    # What a reader gets (validate.record) is what the writer wrote, field for field.
    assert validate.record("session", rec.id, data) == json.loads(data)
    # `user` is written only where it is true; null lines stay null.
    assert [sorted(f) for f in json.loads(data)["frames"]] == [
        ["file", "function", "line", "locals", "user"], ["file", "function", "line", "locals"]]


def test_the_session_record_keeps_its_wire_shape() -> None:
    """The stdlib's JSON (", " and ": ", \\u escapes): the bytes clients already read."""
    rec = _session(exception=None, frames=None, state="starting")
    assert rec.to_json().startswith(b'{"id": "a1b2c3d4e5f6", "job_id": "01000000", "pid": 4242, ')
    assert rec.to_json().endswith(b'"socket": null, "frames": null, "attachable": false}')
    assert list(json.loads(rec.to_json())) == [f.encode_name for f in msgspec.structs.fields(schema.SessionRecord)]


@pytest.mark.parametrize(("kind", "field", "value", "error"), [
    ("session", "pid", "1234", "Expected `int`, got `str` - at `$.pid`"),
    ("session", "pid", True, "Expected `int`, got `bool` - at `$.pid`"),
    ("session", "state", "hacked", "Invalid enum value 'hacked' - at `$.state`"),
    ("session", "exception", {"message": 3}, "Expected `str`, got `int` - at `$.exception.message`"),
    ("session", "frames", [{"line": "12"}], "Expected `int | null`, got `str` - at `$.frames[0].line`"),
    ("event", "ts", "now", "Expected `float`, got `str` - at `$.ts`"),
    ("agent", "node_ip", "evil.example.com", "expected an IP address at `$.node_ip`"),
])
def test_a_field_of_the_wrong_type_is_refused_in_one_line_naming_it(
        kind: str, field: str, value: object, error: str) -> None:
    good = {
        "session": _session().to_dict(),
        "event": {"id": "0badf00d", "ts": 1.5, "kind": "hang", "message": "m", "details": {}},
        "agent": {"node_id": "ab" * 28, "node_ip": "10.0.0.2", "port": 4242},
    }[kind]
    with pytest.raises(validate.Malformed) as refused:
        validate.record(kind, None, json.dumps({**good, field: value}).encode())
    assert str(refused.value) == error


def test_unknown_fields_are_kept_and_missing_optional_ones_defaulted() -> None:
    old = {"id": "0badf00d", "ts": 2, "kind": "memory.kill", "from_a_newer_writer": [1]}
    got = validate.record("event", None, json.dumps(old).encode())
    assert got == {**old, "node_id": "", "message": "", "details": {}}
    assert list(got)[:4] == list(old)  # the writer's order first, the defaults after


def test_an_event_is_written_through_its_struct_with_typed_details(kv: FakeGcs) -> None:
    event = registry.record_event("session.timeout", "session x timed out", node_id="n",
                                  details=schema.SessionEventDetails(session="x", pid=3))
    (key,) = kv.data
    assert key.decode() == f"event/{int(event['ts'] * 1000):015d}-{event['id']}"
    assert json.loads(kv.data[key]) == event
    assert list(event) == ["id", "ts", "kind", "node_id", "message", "details"]
    assert event["details"] == {"session": "x", "pid": 3}
    assert registry.events() == [event]
    # Loose fields (the kinds not typed yet) still go into details.
    loose = registry.record_event("hang", "stalled", job_id="01", stalled_for_s=61.0)
    assert loose["details"] == {"job_id": "01", "stalled_for_s": 61.0}


def test_a_progress_beat_is_a_progress_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_PROGRESS_BASE", str(tmp_path))
    beat = progress_records.Beat()
    beat.beat(5, source="train.report")
    beat.beat(6, source="train.report")
    try:
        (rec,) = progress_records.read_all()
    finally:
        beat.done()
    got = msgspec.convert(rec, schema.ProgressBeat)
    assert (got.step, got.source, got.pid, len(got.busy_s)) == (6, "train.report", os.getpid(), 1)
    # The gang's names for a Train rank, from the one table.
    assert set(TRAIN_NAMES.values()) <= set(rec)


def test_a_record_that_is_not_a_beat_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDBG_PROGRESS_BASE", str(tmp_path))
    path = progress_records.progress_dir() / str(os.getpid())
    path.write_text(json.dumps({"ts": "yesterday", "step": 1}))
    assert progress_records.read_all() == []


def test_a_worker_imports_no_msgspec_until_it_writes_a_record() -> None:
    """msgspec and the structs cost a few ms: a worker's setup and its pause path's modules load
    without them (the first record written imports them)."""
    code = ("import sys\n"
            "from raydbg import registry, validate, progress_records\n"
            "from raydbg.gang import cooperative_agent, cooperative_worker\n"
            "from raydbg.worker import session, resume, hook\n"
            "progress_records.beat()\n"
            "assert validate.parse(b'{}') == {}\n"
            "print('msgspec' in sys.modules, 'raydbg.schema' in sys.modules)\n"
            "session.build_record(sys._getframe(), 'breakpoint', None)\n"
            "print('msgspec' in sys.modules)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAYDBG_PROGRESS_BASE": "/tmp/raydbg-test-schema-imports"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True"]


# --- the generated copies ---------------------------------------------------------------------
def test_the_committed_generated_files_are_fresh() -> None:
    assert schema_gen.stale(REPO) == [], f"run `{schema_gen.COMMAND}`"


def test_the_check_fails_on_a_stale_file_and_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for rel in (schema_gen.DOCS, schema_gen.TYPESCRIPT):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    assert schema_gen.main(["--root", str(tmp_path)]) == 0
    assert schema_gen.main(["--check", "--root", str(tmp_path)]) == 0
    docs = tmp_path / schema_gen.DOCS
    docs.write_text(docs.read_text().replace("| `train_world_size` |", "| `world_size` |"))  # a hand edit
    capsys.readouterr()
    assert schema_gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err == f"{schema_gen.DOCS} is stale: run `{schema_gen.COMMAND}` and commit it\n"
    (tmp_path / schema_gen.TYPESCRIPT).unlink()
    assert schema_gen.stale(tmp_path) == [schema_gen.DOCS, schema_gen.TYPESCRIPT]


def test_a_schema_change_makes_the_generated_files_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for rel in (schema_gen.DOCS, schema_gen.TYPESCRIPT):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
    schema_gen.write(tmp_path)

    class NewRecord(schema.Record):
        """A record added to the schema."""

        name: str = ""

    monkeypatch.setattr(schema, "DOCUMENTED", (*schema.DOCUMENTED, NewRecord))
    assert schema_gen.stale(tmp_path) == [schema_gen.DOCS, schema_gen.TYPESCRIPT]
    schema_gen.write(tmp_path)
    assert "## NewRecord" in (tmp_path / schema_gen.DOCS).read_text()
    assert "export interface NewRecord {\n  name: string;\n}" in (tmp_path / schema_gen.TYPESCRIPT).read_text()


def test_the_docs_table_has_every_session_field_and_the_typescript_leaves_out_the_internal_ones() -> None:
    docs = schema_gen.docs()
    ts = schema_gen.typescript()
    for f in msgspec.structs.fields(schema.SessionRecord):
        assert f"| `{f.encode_name}` |" in docs
    session_ts = ts.split("export interface SessionRecord {")[1].split("}")[0]
    assert "  port" not in session_ts and "  socket" not in session_ts and "  train_world_size: number | null;" in session_ts
    assert "  user?: boolean;" in ts  # written only when set


# --- stack reports and beats from other nodes ----------------------------------------------------
def test_a_workers_own_stacks_and_their_classes_are_stack_records() -> None:
    from raydbg.gang import own_threads, stack_classes, worker_labels

    worker = {**worker_labels.base_identity(os.getpid(), "ray::train", "ab" * 28, "10.0.0.2"),
              "threads": own_threads.threads(), "source": "cooperative", "cooperative_format": "thread"}
    got = msgspec.convert(worker, schema.WorkerStacks)
    assert got.threads and got.threads[0].frames and got.source == "cooperative"
    (klass,) = stack_classes.group([worker])
    assert msgspec.convert(klass, schema.StackClass).members == [
        schema.StackMember(node_id="ab" * 28, pid=os.getpid(), world_rank=None)]


def test_the_gateway_checks_what_other_nodes_send(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from raydbg import dial
    from raydbg.gang import cluster_view

    beat = {"ts": 1.5, "step": 3, "source": "progress", "job_id": "01", "node_id": "n2", "pid": 7}

    async def ask_agents(path: str, *a: object, **kw: object) -> tuple[list[object], list[dict[str, str]]]:
        return [[beat, {"ts": "yesterday", "step": 1}, "junk"], {"not": "a list"}], []

    monkeypatch.setattr(dial, "ask_agents", ask_agents)
    monkeypatch.setattr(progress_records, "read_all", lambda: [])
    assert asyncio.run(cluster_view.merged_progress("t", "n1")) == ([beat], [])
