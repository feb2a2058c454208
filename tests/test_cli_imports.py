"""The CLI at shell speed: building the parser and `raydbg list` import neither aiohttp, Ray, Textual,
rich nor the telemetry reader (nor asyncio for `list`), and a client given RAY_ADDRESS finds its
cluster's gateway in ~/.raydbg without Ray, whatever /tmp/ray/session_latest is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raydbg import client, gateway_file

HEAVY = ("aiohttp", "ray", "textual", "rich", "opentelemetry", "raydbg.telemetry", "raydbg.tui.app",
         "raydbg.activation.agents", "debugpy")

PROBE = r"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, HTTPServer

class Sessions(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

server = HTTPServer(("127.0.0.1", 0), Sessions)
threading.Thread(target=server.serve_forever, daemon=True).start()
before = set(sys.modules)  # the probe's own imports (http.server, threading) are not the CLI's
from raydbg import cli
argv = sys.argv[1:] + (["--address", f"127.0.0.1:{server.server_port}"] if sys.argv[1:2] == ["list"] else [])
try:
    code = cli.main(argv)
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(set(sys.modules) - before)}), file=sys.stderr)
"""


def _imported(*argv: str) -> tuple[int, list[str], str]:
    env = {**os.environ, "RAYDBG_TOKEN": "t"}
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=60)
    report = json.loads(out.stderr.strip().splitlines()[-1])
    return int(report["code"] or 0), list(report["modules"]), out.stdout


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize("argv", [["--help"], ["list", "--help"], ["continue", "--help"]])
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    code, modules, out = _imported(*argv)
    assert code == 0 and "usage: raydbg" in out
    assert _heavy(modules) == [] and "asyncio" not in modules


def test_list_imports_no_event_loop_and_nothing_heavy() -> None:
    code, modules, out = _imported("list")
    assert (code, out) == (0, "no paused sessions\n")
    assert _heavy(modules) == [] and "asyncio" not in modules


def test_version_still_prints_the_versions() -> None:
    out = subprocess.run([sys.executable, "-m", "raydbg", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("raydbg ") and "ray" in out.stdout, out


def test_ray_address_finds_the_gateway_left_in_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    session = tmp_path / "session"
    session.mkdir()
    gateway = {"address": "10.0.0.1:7000", "pid": os.getpid(), "gcs_address": "10.0.0.1:6379"}
    gateway_file.write(str(session), gateway)
    assert gateway_file.read_index("10.0.0.1:6379") == gateway
    assert (tmp_path / "home" / ".raydbg" / "gateways").stat().st_mode & 0o077 == 0

    other = tmp_path / "latest"  # /tmp/ray/session_latest: another cluster's session
    other.mkdir()
    monkeypatch.setattr(client, "LOCAL_SESSION", other)
    monkeypatch.delenv("RAYDBG_GATEWAY", raising=False)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    monkeypatch.setattr(client, "_gateway_from_gcs", lambda address: pytest.fail("asked Ray"))
    assert client.find_gateway() == "10.0.0.1:7000"

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    gateway_file.write_index({**gateway, "pid": gone.pid})  # left by a killed agent: Ray is asked
    monkeypatch.setattr(client, "_gateway_from_gcs", lambda address: "10.0.0.1:7001")
    assert client.find_gateway() == "10.0.0.1:7001"

    gateway_file.write(str(session), gateway)
    gateway_file.remove(str(session))  # the agent's stop removes both files
    assert not gateway_file.index_path("10.0.0.1:6379").exists()
    assert not gateway_file.path(session).exists()


def test_remove_keeps_a_newer_agents_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    old = {"address": "10.0.0.1:7000", "pid": 1, "gcs_address": "10.0.0.1:6379"}
    gateway_file.write(str(tmp_path), old)
    gateway_file.write_index({**old, "address": "10.0.0.1:7002", "pid": 2})  # a newer head agent
    gateway_file.remove(str(tmp_path))
    assert gateway_file.read_index("10.0.0.1:6379")["address"] == "10.0.0.1:7002"
