"""Which threads of this worker raydbg holds stopped right now (worker side; no imports, so any reader is free).

debugpy_control adds a thread while it suspends it and removes it once it runs on; the
stacks snapshot (gang/own_threads.py) and `raydbg continue` (resume.py) read it.
"""

from __future__ import annotations

_idents: set[int] = set()


def add(ident: int) -> None:
    _idents.add(ident)


def discard(ident: int) -> None:
    _idents.discard(ident)


def current() -> frozenset[int]:
    """A copy, taken without a lock: a signal handler (the stacks fallback) may ask while its
    thread is inside debugpy_control's lock."""
    return frozenset(_idents)
