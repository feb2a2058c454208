"""Session-wide settings for the whole suite.

The test process ends through the interpreter's ordinary teardown, after dozens of Ray
clusters have come and gone in it, so a crash at exit fails the run. (One SIGSEGV there was
seen once in CI, 2026-12-03. Since then Ray's shutdown waits for raydbg's agent starts:
without that wait a driver leaving during its agent start exited 1; see
tests/e2e/test_driver_exit.py and benchmarks/exit_stress.py.)
"""
