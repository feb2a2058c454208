"""The CLI at shell speed: building the parser and `raydbg list` import neither aiohttp, Ray, Textual,
rich nor the telemetry reader (nor asyncio for `list`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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
