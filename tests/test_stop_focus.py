"""dap_rewrite.StopFocus: the session's own thread's `stopped` reaches the client first (no Ray)."""

from __future__ import annotations

from typing import Any

from raydbg.agent.dap_rewrite import FOCUS_SEQ, StopFocus


def stopped(thread: int) -> dict[str, Any]:
    return {"seq": thread, "type": "event", "event": "stopped",
            "body": {"reason": "breakpoint", "threadId": thread, "allThreadsStopped": False}}


def threads(*names: tuple[int, str], success: bool = True) -> dict[str, Any]:
    return {"seq": 99, "type": "response", "request_seq": FOCUS_SEQ, "command": "threads",
            "success": success, "body": {"threads": [{"id": i, "name": n} for i, n in names]}}


def test_the_other_threads_stop_is_held_until_the_sessions_own() -> None:
    focus = StopFocus("Dummy-1")
    out, ask = focus.from_debuggee(stopped(2), 0.0)
    assert out == [] and ask == [{"seq": FOCUS_SEQ, "type": "request", "command": "threads"}]
    output = {"seq": 5, "type": "event", "event": "output", "body": {"output": "x"}}
    assert focus.from_debuggee(output, 0.1) == ([output], [])  # only stops wait
    assert focus.from_debuggee(threads((1, "Dummy-1"), (2, "Dummy-2"), (3, "MainThread")), 0.1) == ([], [])
    out, ask = focus.from_debuggee(stopped(1), 0.2)
    assert [m["body"]["threadId"] for m in out] == [1, 2] and ask == []
    assert "preserveFocusHint" not in out[0]["body"] and out[1]["body"]["preserveFocusHint"] is True
    assert focus.done
    late = stopped(2)
    assert focus.from_debuggee(late, 0.3) == ([late], [])  # after that, nothing is touched


def test_the_sessions_stop_first_goes_out_once_its_thread_is_known() -> None:
    focus = StopFocus("Dummy-1")
    focus.from_debuggee(stopped(1), 0.0)
    out, _ = focus.from_debuggee(threads((1, "Dummy-1"), (2, "Dummy-2")), 0.1)
    assert [m["body"]["threadId"] for m in out] == [1] and focus.done


def test_the_hold_is_bounded() -> None:
    focus = StopFocus("Dummy-1", hold_s=3.0)
    focus.from_debuggee(stopped(2), 10.0)
    focus.from_debuggee(threads((1, "Dummy-1"), (2, "Dummy-2")), 10.1)
    assert focus.expire(12.9) == []
    assert [m["body"]["threadId"] for m in focus.expire(13.0)] == [2] and focus.done


def test_unknown_or_shared_names_keep_the_order() -> None:
    for reply in (threads((2, "Dummy-2")), threads((1, "Dummy-1"), (2, "Dummy-1")), threads(success=False)):
        focus = StopFocus("Dummy-1")
        focus.from_debuggee(stopped(2), 0.0)
        out, _ = focus.from_debuggee(reply, 0.1)
        assert [m["body"]["threadId"] for m in out] == [2] and focus.done


def test_a_held_stop_that_no_longer_holds_is_dropped() -> None:
    focus = StopFocus("Dummy-1")
    focus.from_debuggee(stopped(2), 0.0)
    continued = {"seq": 7, "type": "event", "event": "continued", "body": {"threadId": 2}}
    assert focus.from_debuggee(continued, 0.1) == ([continued], [])
    focus.from_debuggee(threads((1, "Dummy-1"), (2, "Dummy-2")), 0.1)
    assert [m["body"]["threadId"] for m in focus.from_debuggee(stopped(1), 0.2)[0]] == [1]


def test_no_thread_name_no_change() -> None:
    focus = StopFocus(None)
    assert focus.done and focus.from_debuggee(stopped(2), 0.0) == ([stopped(2)], [])
