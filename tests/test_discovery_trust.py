"""Gateway discovery trusts only what another local user cannot plant or outlive: the head
agent's file in our own private folders (never Ray's shared session dir), naming the very
agent process (pid, start time, uid, boot id); Ray's `ray_current_cluster` only when ours."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from other_user import OTHER_UID, can_be_other_user

from raydbg import client, gateway_file
from raydbg.client import GatewayError
from raydbg.private_dir import UnsafeDirError, private_dir, private_name, session_path
from raydbg.proc_identity import ProcessIdentity

SESSION = "session_2026-12-06_10-00-00_123_456"
GCS = "10.0.0.1:6379"


@pytest.fixture
def tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Our own TMPDIR and HOME, and a /tmp/ray stand-in (world-writable, as Ray's is)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(mode=0o1777)
    os.chmod(tmp_path / "tmp", 0o1777)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir()
    os.chmod(ray_tmp, 0o777)
    (ray_tmp / "session_latest").symlink_to(ray_tmp / SESSION)
    monkeypatch.setattr(client, "RAY_TMP", ray_tmp)
    for var in ("RAYDBG_GATEWAY", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(client, "_gateway_from_gcs", lambda address: pytest.fail(f"asked Ray at {address}"))
    return tmp_path


def _agent(**changes: Any) -> dict[str, Any]:
    return {"address": "10.0.0.1:7000", "gcs_address": GCS, **ProcessIdentity.mine().fields(), **changes}


def test_the_gateway_file_lives_in_our_private_folders_and_names_its_agent(tmp: Path) -> None:
    gateway_file.write(SESSION, _agent())
    target = gateway_file.path(SESSION)
    assert target == tmp / "tmp" / f"raydbg-{os.getuid()}" / "sessions" / SESSION / "gateway.json"
    for d in (target.parent, target.parent.parent, target.parent.parent.parent):
        assert os.lstat(d).st_mode & 0o077 == 0
    assert client.find_gateway() == "10.0.0.1:7000"  # the session /tmp/ray names: only its name is used
    assert client._local_gateway_file(SESSION, gcs_address=GCS) == "10.0.0.1:7000"
    assert client._local_gateway_file(SESSION, gcs_address="10.0.0.2:6379") is None


@pytest.mark.parametrize("what", ["dead pid", "reused pid", "another uid", "another boot", "no identity"])
def test_a_file_naming_another_process_is_never_trusted(tmp: Path, what: str) -> None:
    me = ProcessIdentity.mine()
    if what == "dead pid":
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        rec = _agent(pid=gone.pid)
    elif what == "reused pid":  # a live process with the pid the agent had: it started later
        rec = _agent(start_time=me.start_time - 1)
    elif what == "another uid":
        rec = _agent(uid=me.uid + 1)
    elif what == "another boot":
        rec = _agent(boot_id="00000000-0000-0000-0000-000000000000")
    else:
        rec = {"address": "10.0.0.1:7000", "gcs_address": GCS, "pid": me.pid}  # an older agent's
    gateway_file.write(SESSION, rec)
    gateway_file.write_index(rec)
    assert client._local_gateway_file(SESSION) is None
    assert client._local_gateway_index(GCS) is None
    with pytest.raises(GatewayError, match="not active on the local Ray cluster|no Ray cluster found"):
        client.find_gateway(ask_gcs=False)


def test_ray_address_finds_its_cluster_in_home_whatever_session_latest_is(tmp: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    gateway_file.write("session_2026-01-01_00-00-00_1_1", _agent())  # not the latest session
    assert (tmp / "home" / ".raydbg" / "gateways").stat().st_mode & 0o077 == 0
    monkeypatch.setenv("RAY_ADDRESS", GCS)
    assert client.find_gateway() == "10.0.0.1:7000"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    gateway_file.write_index(_agent(pid=gone.pid))  # left by a stopped agent: Ray is asked
    monkeypatch.setattr(client, "_gateway_from_gcs", lambda address: "10.0.0.1:7001")
    assert client.find_gateway() == "10.0.0.1:7001"


def test_remove_takes_both_files_and_keeps_a_newer_agents_entry(tmp: Path) -> None:
    gateway_file.write(SESSION, _agent())
    gateway_file.remove(SESSION)
    assert not gateway_file.index_path(GCS).exists() and not gateway_file.path(SESSION).exists()
    gateway_file.write(SESSION, _agent())
    gateway_file.write_index(_agent(address="10.0.0.1:7002", pid=2))  # a newer head agent's
    gateway_file.remove(SESSION)
    assert gateway_file.read_index(GCS)["address"] == "10.0.0.1:7002"


def test_session_names_from_ray_are_names_only(tmp: Path) -> None:
    for bad in ("../../etc", "session_x/../../y", "..", "other", "session_" + "x" * 300):
        with pytest.raises(ValueError):
            session_path(bad)
    (client.RAY_TMP / "session_latest").unlink()
    (client.RAY_TMP / "session_latest").symlink_to("/etc")
    assert client._local_session() is None


def test_nothing_of_ours_is_kept_in_a_directory_others_may_rename_in(tmp_path: Path) -> None:
    shared = tmp_path / "session_dir"  # Ray's session dir: 0777, no sticky bit
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(UnsafeDirError, match="lets other users rename what is in it"):
        private_dir(shared)
    assert list(shared.iterdir()) == []


@can_be_other_user
def test_a_planted_current_cluster_file_is_ignored(tmp: Path) -> None:
    current = client.RAY_TMP / "ray_current_cluster"
    current.write_text("10.6.6.6:6379\n")  # another user's file: their GCS, our token
    os.chown(current, OTHER_UID, OTHER_UID)
    assert client._local_gcs_address() is None
    current.unlink()
    os.mkfifo(current)  # a FIFO would block the reader for ever
    assert client._local_gcs_address() is None
    current.unlink()
    current.write_text(GCS + "\n")  # ours
    assert client._local_gcs_address() == GCS


@can_be_other_user
def test_a_private_folder_made_first_by_another_user_is_said_in_one_line(tmp: Path) -> None:
    from raydbg.private_dir import private_dir_problem

    mine = tmp / "tmp" / private_name()
    mine.mkdir(mode=0o700)
    os.chown(mine, OTHER_UID, OTHER_UID)
    problem = private_dir_problem()
    assert problem is not None and "\n" not in problem
    assert f"belongs to uid {OTHER_UID}" in problem and "TMPDIR" in problem
    with pytest.raises(GatewayError, match=f"belongs to uid {OTHER_UID}"):
        client.find_gateway()
