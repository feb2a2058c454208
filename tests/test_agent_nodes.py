"""The agent's node memory: the running monitor's own measurement when there is one, else its own (no Ray)."""

from __future__ import annotations

from raydbg.agent import nodes


def test_the_monitors_measurement_is_taken_as_it_is() -> None:
    measured = {"used": 3, "limit": 8, "fraction": 0.375, "source": "cgroup2", "psi": {}}
    assert nodes.node_memory(measured) == {"used": 3, "limit": 8}


def test_without_one_the_agent_measures_the_node_itself() -> None:
    for measured in (None, {}, {"used": "3", "limit": 8}):
        got = nodes.node_memory(measured)
        assert 0 < got["used"] <= got["limit"]
