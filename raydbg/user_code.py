"""Which code is the user's: the one rule, and the roots a job's code adds to it (pure; any process).

A file is the user's when it is under one of the *roots* of what the job runs (the module
file and the top-level package of the function Ray runs, wherever installed, site-packages
included; the job's working_dir; the driver script's directory; a package RAYDBG_USER_CODE
names), or else when it lies outside the standard library and the installed-packages
directories. Never the user's: raydbg itself, native code, and pseudo-files (`<string>`,
`<frozen ...>`, `<stdin>`: code made by `exec`, which no editor can show), whatever a root says.

Used by the stack summaries and classes (the frame that names a class), `raydbg pause` (the
line it stops at), hang and straggler events and the post-mortem's frame. The worker knows
its roots (raydbg/worker/user_roots.py) and marks the frames they add (`"user": true`);
elsewhere the roots are RAYDBG_USER_CODE of the process (default_roots).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

USER_CODE_ENV = "RAYDBG_USER_CODE"
DRIVER_DIR_ENV = "RAYDBG_DRIVER_DIR"

_RAYDBG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# raydbg installed elsewhere than here (another node's checkout): its subpackages by name.
_RAYDBG_ELSEWHERE = re.compile(r"/raydbg/(worker|agent|gang|dap|memory|telemetry|breakpoints|tui)/")
_STDLIB = re.compile(r"/lib/python3\.\d+/")
_PACKAGE_DIRS = ("/site-packages/", "/dist-packages/")
_NATIVE_SUFFIXES = (".so", ".dylib", ".dll")
# Code of these packages is never a root, even when Ray hands it the work (Ray's wrappers
# around the user's function, Ray Train's worker class): name a part of it in RAYDBG_USER_CODE
# (`ray.train.examples`) to make that part the user's.
_NEVER_ROOTS = frozenset({"ray", "raydbg"})
_PACKAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def is_pseudo(file: str) -> bool:
    """`<string>`, `<frozen importlib._bootstrap>`, `<stdin>`, `<attrs generated init ...>`."""
    return file.startswith("<")


def is_native_file(file: str) -> bool:
    return file.endswith(_NATIVE_SUFFIXES) or ".so." in file


def is_raydbg_file(file: str) -> bool:
    return file.startswith(_RAYDBG_DIR) or bool(_RAYDBG_ELSEWHERE.search(file))


def is_library_path(file: str) -> bool:
    """The standard library or an installed-packages directory, by path alone."""
    return any(d in file for d in _PACKAGE_DIRS) or bool(_STDLIB.search(file))


def installed_module(file: str) -> str | None:
    """`/v/lib/python3.11/site-packages/pkg/sub/m.py` -> `pkg.sub.m`; None outside installed packages."""
    cut = max(file.rfind(d) for d in _PACKAGE_DIRS)
    if cut < 0:
        return None
    rest = file[cut:].split("/", 2)[2]  # what follows "/site-packages/"
    for suffix in (".py", ".pyc", ".pyi"):
        if rest.endswith(suffix):
            rest = rest[: -len(suffix)]
            break
    parts = [p for p in rest.split("/") if p]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or None


def _under_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@dataclass(frozen=True)
class Roots:
    """What a job's code adds to the path rule: directories (each ending in a separator),
    single files, and packages by dotted name (matched in installed-packages directories)."""

    dirs: tuple[str, ...] = ()
    files: frozenset[str] = frozenset()
    packages: frozenset[str] = frozenset()
    _verdicts: dict[str, bool] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def covers(self, file: str) -> bool:
        """Under a root (the rule's exclusions aside)."""
        if file in self.files or any(file.startswith(d) for d in self.dirs):
            return True
        if not self.packages:
            return False
        module = installed_module(file)
        return module is not None and any(_under_package(module, p) for p in self.packages)

    def is_user(self, file: str) -> bool:
        """The rule (see the module docstring); remembered per file name."""
        verdict = self._verdicts.get(file)
        if verdict is None:
            verdict = _judge(file, self)
            if len(self._verdicts) < 20_000:  # a process sees a few thousand files at most
                self._verdicts[file] = verdict
        return verdict

    def adds(self, file: str) -> bool:
        """The roots make `file` the user's where the path alone would not (what a worker marks)."""
        return self.is_user(file) and not EMPTY.is_user(file)

    def merged(self, other: Roots) -> Roots:
        return Roots(tuple(dict.fromkeys(self.dirs + other.dirs)), self.files | other.files,
                     self.packages | other.packages)


EMPTY = Roots()


def _judge(file: str, roots: Roots) -> bool:
    if not file or is_pseudo(file) or is_native_file(file) or is_raydbg_file(file):
        return False
    return roots.covers(file) or not is_library_path(file)


def is_user_file(file: str, roots: Roots | None = None) -> bool:
    """Is `file` the user's code? `roots`: the worker's (default: this process's RAYDBG_USER_CODE)."""
    return (roots if roots is not None else default_roots()).is_user(file)


# --- RAYDBG_USER_CODE ---------------------------------------------------------------
def parse_packages(text: str) -> tuple[frozenset[str], list[str]]:
    """`pkg_a, team.train` -> the package names, and the entries that are not one."""
    names, bad = set(), []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        (names.add(entry) if _PACKAGE_NAME.fullmatch(entry) else bad.append(entry))
    return frozenset(names), bad


@functools.lru_cache(maxsize=4)
def _env_roots(text: str) -> Roots:
    names, bad = parse_packages(text)
    if bad:
        import logging

        logging.getLogger("raydbg").warning(
            "raydbg: %s: %s is not a package name (give names such as pkg_a,team.train); left out",
            USER_CODE_ENV, ", ".join(repr(b) for b in bad))
    return Roots(packages=names)


def default_roots() -> Roots:
    """This process's RAYDBG_USER_CODE as roots (read at each call, parsed once per value)."""
    return _env_roots(os.environ.get(USER_CODE_ENV, ""))


def driver_dir(main_file: str | None) -> str | None:
    """The driver script's directory (`__main__.__file__`) as a root; None where there is
    none (`-c`, a REPL) or it would make a packages directory itself, the stdlib, Ray or
    raydbg the user's (a launcher such as `ipykernel_launcher.py`)."""
    if not main_file or is_pseudo(main_file):
        return None
    directory = os.path.dirname(os.path.abspath(main_file))
    probe = directory + "/x.py"
    module = installed_module(probe)
    if module == "x" or is_raydbg_file(probe):
        return None
    if module is None and _STDLIB.search(probe):
        return None
    if module is not None and module.split(".")[0] in _NEVER_ROOTS:
        return None
    return directory + os.sep


# --- roots of the objects Ray runs --------------------------------------------------
# Read statically (exact types, function and class dicts, closure cells): looking for the
# roots never calls the job's code (no user __getattr__, property or __instancecheck__ runs).
def _code_file(fn: Any) -> str | None:
    return fn.__code__.co_filename if type(fn) is types.FunctionType else None


def _framework(file: str) -> bool:
    """Code that hands the work on (Ray's wrappers, raydbg, the stdlib): looked through, never a root."""
    if is_pseudo(file) or is_raydbg_file(file):
        return True
    module = installed_module(file)
    if module is not None:
        return module.split(".")[0] in _NEVER_ROOTS
    return bool(_STDLIB.search(file))


def _wrapped(fn: Any) -> Any:
    """functools.wraps' target of a function, if it has one."""
    return fn.__dict__.get("__wrapped__") if type(fn) is types.FunctionType else None


def _inner(obj: Any) -> Iterator[Any]:
    """What a wrapper calls: functools.wraps' target, a closure's callables, Ray's actor-method
    executor's method, a partial's function, a bound method's function; an instance's class."""
    kind = type(obj)
    if kind is types.FunctionType:
        for name in ("__wrapped__", "method"):  # functools.wraps; Ray's actor-method executor
            if (inner := obj.__dict__.get(name)) is not None:
                yield inner
        for cell in obj.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(value) and not issubclass(type(value), type):
                yield value
    elif kind is types.MethodType:
        yield obj.__func__
    elif kind is functools.partial:
        yield obj.func
    elif callable(obj):
        yield kind  # an instance with __call__: its class


def _module_of(obj: Any) -> str | None:
    module = obj.__module__ if type(obj) is types.FunctionType else vars(obj).get("__module__")
    return module if isinstance(module, str) else None


def entry_points(objects: Iterable[Any], depth: int = 6, budget: int = 5000) -> list[tuple[str, str | None]]:
    """(file, module) of each function or class Ray hands the work to, looking through the
    wrappers of Ray, raydbg and the stdlib (closures, `__wrapped__`, partials) and through any
    decorator's `functools.wraps` wrapper, never into the user's own functions. Bounded:
    `depth` levels, `budget` objects in all."""
    out: dict[str, str | None] = {}
    seen: set[int] = set()
    todo = [(obj, 0) for obj in objects]
    while todo and budget > 0:
        obj, level = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        budget -= 1
        if issubclass(type(obj), type):
            # Ray's actor class subclasses the user's (ray/actor.py `_modify_class`): its bases.
            for klass in obj.__mro__[:8]:
                file = next((f for f in map(_code_file, vars(klass).values()) if f), None)
                if file and not _framework(file):
                    out.setdefault(file, _module_of(klass))
                    break
            continue
        file = _code_file(obj)
        # A decorator's wrapper (functools.wraps: `__wrapped__`, torch.no_grad's too) is looked
        # through as Ray's are: the function it wraps is the one the user wrote.
        if file is not None and not _framework(file) and _wrapped(obj) is None:
            out.setdefault(file, _module_of(obj))
            continue
        if level < depth:
            todo.extend((inner, level + 1) for inner in _inner(obj))
    return list(out.items())


def roots_of(entries: Iterable[tuple[str, str | None]], dirs: Iterable[str] = ()) -> Roots:
    """Roots from entry points (file, module): each file, and its top-level package where it
    is installed (from the module name, or from the path for `__main__` code Ray pickled by
    value); plus `dirs`."""
    files, packages = set(), set()
    for file, module in entries:
        files.add(file)
        installed = installed_module(file)
        if installed is None:
            continue  # a plain path is the user's by the path rule already
        name = module if module and module not in ("__main__", "__mp_main__") else installed
        top = name.split(".")[0]
        if top and top not in _NEVER_ROOTS and top not in getattr(sys, "stdlib_module_names", ()):
            packages.add(top)
    return Roots(tuple(d if d.endswith(os.sep) else d + os.sep for d in dirs), frozenset(files),
                 frozenset(packages))
