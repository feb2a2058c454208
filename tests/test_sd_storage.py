"""sd_reference's storage layer without Ray: URIs, a local S3 server, the per-node cache, the run log, the multi-node check."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import s3_server

from sd_reference import runlog, sources, storage, synth
from sd_reference.errors import UserError


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    with s3_server("unit") as endpoint:
        yield endpoint


def test_join_keeps_uri_options_and_local_paths() -> None:
    uri = "s3://bucket/runs?endpoint_override=http://127.0.0.1:9000&scheme=http"
    assert storage.join(uri, "r1", "step_00000002") == \
        "s3://bucket/runs/r1/step_00000002?endpoint_override=http://127.0.0.1:9000&scheme=http"
    assert storage.join("s3://bucket/", "a") == "s3://bucket/a"
    assert storage.join("sd_work/runs", "r1") == str(Path("sd_work/runs/r1"))
    assert storage.name(uri) == "runs" and storage.name("/x/y/") == "y"
    assert storage.is_remote(uri) and not storage.is_remote("file:///mnt/x") and storage.has_scheme("file:///mnt/x")


def test_local_files_through_the_same_calls(tmp_path: Path) -> None:
    uri = storage.join(tmp_path, "a", "b.json")
    storage.write_text(uri, "{}")
    assert storage.read_text(uri) == "{}" and storage.exists(uri) and storage.is_dir(str(tmp_path / "a"))
    assert storage.append_text(uri, "\n1") and storage.read_text(uri) == "{}\n1"
    assert storage.list_dir(str(tmp_path)) == ["a"] and storage.list_dir(str(tmp_path / "missing")) == []
    assert storage.list_files(str(tmp_path)) == [uri]
    assert storage.localize(f"file://{tmp_path}") == tmp_path  # local: used in place, no copy


def test_s3_round_trip_listing_and_no_append(s3: str) -> None:
    root = "s3://unit/round-trip"
    storage.write_text(storage.join(root, "x", "one.txt"), "1")
    storage.write_bytes(storage.join(root, "two.bin"), b"\x00\x01")
    assert storage.read_text(storage.join(root, "x", "one.txt")) == "1"
    assert storage.list_dir(root) == ["two.bin", "x"]
    assert storage.list_files(root) == [storage.join(root, "two.bin"), storage.join(root, "x", "one.txt")]
    assert storage.is_dir(storage.join(root, "x")) and not storage.exists(storage.join(root, "nothing"))
    assert storage.append_text(storage.join(root, "two.bin"), "more") is False  # object stores cannot append
    assert storage.read_bytes(storage.join(root, "two.bin")) == b"\x00\x01"


def test_localize_copies_once_per_node_and_sees_new_uploads(s3: str, tmp_path: Path) -> None:
    src = tmp_path / "components"
    (src / "vae").mkdir(parents=True)
    (src / "vae" / "config.json").write_text('{"a": 1}')
    uri = "s3://unit/components"
    storage.upload_dir(src, uri)
    first = storage.localize(uri)
    assert json.loads((first / "vae" / "config.json").read_text()) == {"a": 1}
    assert first.is_relative_to(storage.cache_root()) and storage.localize(uri) == first  # cached
    (src / "vae" / "config.json").write_text('{"a": 22}')
    storage.upload_dir(src, uri, replace=True)
    second = storage.localize(uri)
    assert second != first and json.loads((second / "vae" / "config.json").read_text()) == {"a": 22}


def test_sources_detect_a_dataset_in_s3(s3: str, tmp_path: Path) -> None:
    synth.make_data(tmp_path, num=6, seed=0, shards=2, broken=0, formats=("parquet", "webdataset"))
    storage.upload_dir(tmp_path, "s3://unit/data")
    parquet = sources.detect("s3://unit/data/laion")
    assert parquet.fmt == "parquet" and parquet.rows == 6 and len(parquet.files) == 2
    assert sources.detect("s3://unit/data/wds").fmt == "webdataset"
    with pytest.raises(UserError, match="does not exist"):
        sources.detect("s3://unit/nothing-here")


@pytest.mark.parametrize("where", ["local", "s3"])
def test_run_log_appends_locally_and_writes_parts_on_s3(where: str, s3: str, tmp_path: Path) -> None:
    run = str(tmp_path / "run") if where == "local" else "s3://unit/runs/log-test"
    storage.makedirs(run)
    log = runlog.RunLog(run, flush_s=3600)
    log.write({"event": "start", "step": 0})
    for step in (1, 2):
        log.write({"step": step, "loss": 0.5})
    log.write({"event": "checkpoint", "step": 2})
    log.write({"step": 3, "loss": 0.4})
    log.flush()
    again = runlog.RunLog(run)  # a second driver on the same run continues the log
    again.write({"event": "resume", "step": 2})
    again.flush()
    records = runlog.read(run)
    assert [(r.get("event"), r["step"]) for r in records] == [
        ("start", 0), (None, 1), (None, 2), ("checkpoint", 2), (None, 3), ("resume", 2)]
    assert log.since(3) == log.records[3:] and len(log.since(0)) == 5
    parts = storage.list_dir(storage.join(run, runlog.PARTS_DIR))
    if where == "local":
        assert parts == [] and storage.exists(storage.join(run, runlog.LOG_FILE))
    else:  # events flush at once, steps wait for the next event or flush_s
        assert parts == ["00000001.jsonl", "00000002.jsonl", "00000003.jsonl", "00000004.jsonl"]


def test_a_local_path_on_several_nodes_is_one_clear_error() -> None:
    paths = {"--data": "s3://b/latents", "--storage-path": "sd_work/runs", "--export-dir": None}
    storage.require_reachable(paths, alive_nodes=1, shared=False)  # one node: any path
    storage.require_reachable(paths, alive_nodes=3, shared=True)  # the user says every node mounts it
    storage.require_reachable({"--storage-path": "file:///mnt/nfs/runs"}, alive_nodes=3, shared=False)
    with pytest.raises(UserError) as err:
        storage.require_reachable(paths, alive_nodes=2, shared=False)
    message = str(err.value)
    assert "--storage-path sd_work/runs is a local path" in message and "2 nodes" in message
    assert "s3://" in message and "file://" in message and "--shared-fs" in message and "\n" not in message


def test_a_scheme_only_fsspec_knows_goes_through_fsspec() -> None:
    import pyarrow.fs as pafs

    uri = "memory://sd-storage-test/dir"
    fs, _ = storage.filesystem(uri)
    assert isinstance(fs, pafs.PyFileSystem)  # fsspec's, wrapped for pyarrow (and Ray Data, Ray Train)
    storage.write_text(storage.join(uri, "a.txt"), "fsspec")
    assert storage.read_text(storage.join(uri, "a.txt")) == "fsspec" and storage.list_dir(uri) == ["a.txt"]
    with pytest.raises(UserError, match="no file system"):
        storage.filesystem("nosuchscheme://x/y")
