"""Session-wide settings for the whole suite.

The test process ends through the interpreter's ordinary teardown, after dozens of Ray
clusters have come and gone in it, so a crash at exit fails the run. (One SIGSEGV there was
seen once in CI, 2026-12-03. Since then Ray's shutdown waits for raydbg's agent starts:
without that wait a driver leaving during its agent start exited 1; see
tests/e2e/test_driver_exit.py and benchmarks/exit_stress.py.)
"""

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from doubles import FakeGcs

# Every gateway a test starts records jobs' histories (docs/history.md): into a folder of this
# run, not the user's ~/.raydbg/history. Tests of the history set their own.
if not os.environ.get("RAYDBG_HISTORY"):
    _history = tempfile.mkdtemp(prefix="raydbg-test-history-")
    os.environ["RAYDBG_HISTORY"] = _history
    atexit.register(shutil.rmtree, _history, True)


@pytest.fixture
def kv() -> Iterator[FakeGcs]:
    """raydbg's registry on an in-memory KV for one test."""
    from raydbg import registry

    store = FakeGcs()
    registry.use_client(store)
    yield store
    registry.use_client(None)
