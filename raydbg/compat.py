"""The Ray versions raydbg supports, checked once per process; outside them raydbg stays out of the way.

raydbg patches Ray internals written for one release (raydbg/_ray_internals/). On
another Ray it says so in one line and installs nothing: `breakpoint()` then goes to
Ray's own debugger, as if raydbg were not installed.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

# The Ray releases raydbg is tested on (pyproject.toml says the same, `make test` runs the
# matrix): from the lower bound on, and every patch release of the upper bound's minor.
# The upper bound follows the newest tested release.
SUPPORTED_RAY = ("2.51.0", "2.60.0")

_warned: list[str] = []  # where it was said: once per process


def ray_version() -> str:
    """The installed Ray's version ('' when Ray is not installed)."""
    try:
        return metadata.version("ray")
    except metadata.PackageNotFoundError:
        return ""


def _key(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        lead = re.match(r"\d+", piece)  # "0rc1" -> 0: a pre-release of the bound counts
        parts.append(int(lead.group()) if lead else -1)
    return tuple(parts + [0] * (3 - len(parts)))


def supported(version: str) -> bool:
    """True for a release inside SUPPORTED_RAY: any patch of the upper bound's minor counts,
    and so do pre-releases and dev builds of the bounds."""
    if not version:
        return False
    low, high = SUPPORTED_RAY
    return _key(low) <= _key(version) < _next_minor(high)


def _next_minor(version: str) -> tuple[int, ...]:
    major, minor, _ = _key(version)
    return (major, minor + 1, 0)


def range_text() -> str:
    low, high = SUPPORTED_RAY
    major, minor, _ = _next_minor(high)
    return f">={low},<{major}.{minor}"


def problem(version: str | None = None) -> str | None:
    """One line saying why raydbg stays off on this Ray, or None when it is supported."""
    version = ray_version() if version is None else version
    if supported(version):
        return None
    found = f"Ray {version}" if version else "no Ray"
    return (f"raydbg {_own_version()} supports ray{range_text()}, found {found}: raydbg stays off "
            f"(breakpoint() uses Ray's own debugger); install a supported Ray to use raydbg")


def check(where: str) -> bool:
    """True when this Ray is supported; otherwise say so once per process and return False.

    `where` (driver, worker, agent) is remembered for tests and debugging, not printed.
    """
    text = problem()
    if text is None:
        return True
    if not _warned:
        print(text, file=sys.stderr, flush=True)
    _warned.append(where)
    return False


def _own_version() -> str:
    try:
        return metadata.version("raydbg")
    except metadata.PackageNotFoundError:
        from raydbg.version import __version__

        return __version__


def versions_line() -> str:
    """`raydbg --version`: raydbg's, Ray's, debugpy's and Python's versions (read without importing them)."""
    import platform

    try:
        debugpy = metadata.version("debugpy")
    except metadata.PackageNotFoundError:
        debugpy = "not installed"
    ray = ray_version() or "not installed"
    note = "" if supported(ray_version()) else f" (unsupported: raydbg needs ray{range_text()})"
    return f"raydbg {_own_version()}, ray {ray}{note}, debugpy {debugpy}, python {platform.python_version()}"
