"""Debug view: library frames dimmed and folded in the stack, `f` shows them, `e` jumps to the console
(real debugpy; the gateway is the in-process fake of tui_support)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tui_support import FakeGateway, record, until

from raydbg.tui.app import create_app
from raydbg.tui.console import ConsoleView, HistoryInput
from raydbg.tui.debug_screen import DebugScreen
from raydbg.tui.main_screen import MainScreen
from raydbg.tui.stack_view import StackView, focus_index, rows

SID = "fold00000001"

# The pause is reached through copy.deepcopy: three standard-library frames between
# the user's __deepcopy__ and the user's caller.
DEBUGGEE = textwrap.dedent(
    """
    import copy
    import sys
    import debugpy

    host, port = debugpy.listen(("127.0.0.1", 0))
    print(port, flush=True)
    debugpy.wait_for_client()

    class Weights:
        def __deepcopy__(self, memo):
            inside = 7
            debugpy.breakpoint()
            return Weights()

    def snapshot(items):
        return copy.deepcopy(items)

    result = snapshot([Weights()])
    print("copied", len(result), flush=True)
    sys.stdin.readline()
    """
)


@pytest.fixture
def debuggee(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], FakeGateway]]:
    script = tmp_path / "user_code.py"
    script.write_text(DEBUGGEE)
    proc = subprocess.Popen([sys.executable, "-Xfrozen_modules=off", str(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip().isdigit(), f"debuggee did not start: {line!r}"
    gateway = FakeGateway()
    gateway.sessions_list = [record(SID, time.time(), file=str(script), function="__deepcopy__")]
    gateway.dap_ports[SID] = int(line)
    try:
        yield proc, gateway
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def _labels(stack: StackView) -> list[str]:
    return [str(stack.get_option_at_index(i).prompt) for i in range(stack.option_count)]


def test_rows_fold_runs_of_library_frames_but_not_the_selected_or_innermost() -> None:
    def frame(name: str, path: str) -> dict[str, object]:
        return {"id": 1, "name": name, "line": 3, "column": 1, "source": {"path": path}}

    lib = "/usr/lib/python3.11/site-packages/ray/_private/worker.py"
    frames = [frame("step", "/app/train.py"), frame("_resume_span", lib), frame("actor_method_executor", lib),
              frame("main", "/app/train.py"), frame("run", lib)]
    assert rows(frames, True) == [("frame", [0]), ("fold", [1, 2]), ("frame", [3]), ("frame", [4])]
    assert rows(frames, True, selected=2) == [("frame", [0]), ("frame", [1]), ("frame", [2]),
                                              ("frame", [3]), ("frame", [4])]
    assert rows(frames, False) == [("frame", [i]) for i in range(5)]
    # A raydbg frame (any file of the package) folds like a library frame.
    raydbg_own = [frame("work", "/app/a.py"), frame("run", str(Path(__file__).parents[1] / "raydbg/worker/hook.py")),
                  frame("_raylet", lib), frame("outer", "/app/a.py")]
    assert rows(raydbg_own, True) == [("frame", [0]), ("fold", [1, 2]), ("frame", [3])]


def test_the_frame_a_sessions_record_names_is_the_one_focused_on_attach() -> None:
    def frame(name: str, path: str, line: int) -> dict[str, object]:
        return {"id": line, "name": name, "line": line, "column": 1, "source": {"path": path}}

    decoder = "/usr/lib/python3.11/json/decoder.py"
    frames = [frame("raw_decode", decoder, 355), frame("decode", decoder, 337), frame("load_config", "/app/cfg.py", 12)]
    post_mortem = {"reason": "exception", "file": "/app/cfg.py", "line": 12}  # the user's line, not the raise
    assert focus_index(frames, post_mortem) == 2
    assert focus_index(frames, {"file": "/elsewhere/cfg.py", "line": 12}) == 2  # a path mapped elsewhere
    assert focus_index(frames, {"file": "/app/cfg.py", "line": 13}) == 0  # not in the stack: the top
    assert focus_index(frames, {}) == 0


async def test_library_frames_fold_f_shows_them_e_opens_the_console(
    debuggee: tuple[subprocess.Popen[str], FakeGateway],
) -> None:
    proc, gateway = debuggee
    app = create_app(gateway, attach=SID, refresh=0.1)
    async with app.run_test(size=(100, 32)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, DebugScreen) and app.screen.attach_seconds is not None,
                    timeout=15)
        screen = app.screen
        assert isinstance(screen, DebugScreen)
        stack = screen.query_one(StackView)
        labels = _labels(stack)
        assert labels[0].startswith("__deepcopy__") and labels[2].startswith("snapshot"), labels
        assert "3 library frames (deepcopy, _deepcopy_list, ...)" in labels[1], labels
        assert "bold" in str(stack.get_option_at_index(0).prompt.spans)  # type: ignore[union-attr]

        await pilot.press("f")  # every frame, the library ones dimmed
        labels = _labels(stack)
        assert [x.split()[0] for x in labels[:5]] == ["__deepcopy__", "deepcopy", "_deepcopy_list", "deepcopy",
                                                      "snapshot"], labels
        assert "dim" in str(stack.get_option_at_index(1).prompt.spans)  # type: ignore[union-attr]
        await pilot.press("f")
        assert "library frames" in _labels(stack)[1]

        stack.focus()  # Enter on the fold opens it, the cursor on its first frame
        await pilot.press("down", "enter")
        assert _labels(stack)[1].startswith("deepcopy") and stack.highlighted == 1

        screen.query_one("#source").focus()
        await pilot.press("e")  # one key to the console
        box = screen.query_one(HistoryInput)
        assert app.focused is box
        await pilot.press(*"inside * 6", "enter")
        console = screen.query_one(ConsoleView)
        await until(pilot, lambda: "42" in console.lines)
        await pilot.press("escape", "d")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), timeout=10)
    out, _ = proc.communicate("\n", timeout=15)
    assert "copied 1" in out
