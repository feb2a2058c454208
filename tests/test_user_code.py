"""The one user-code rule (raydbg/user_code.py) and its uses in the worker, without Ray: which
files are the user's given roots, the roots of what Ray runs (through Ray's own wrappers), a
pause that stops in an installed trainer and never in generated code, the post-mortem's frame."""

from __future__ import annotations

import importlib
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

import pytest

from raydbg import user_code
from raydbg.gang import frames, on_demand, stack_classes
from raydbg.user_code import EMPTY, Roots, roots_of
from raydbg.worker import session, snapshot, user_roots

SITE = "/venv/lib/python3.11/site-packages"
TRAINER = f"{SITE}/trainer_pkg/train.py"


def test_pseudo_files_are_never_the_users_whatever_the_roots_say() -> None:
    everything = Roots(dirs=("/",), files=frozenset({"<string>"}), packages=frozenset({"trainer_pkg"}))
    for pseudo in ("<string>", "<frozen importlib._bootstrap>", "<stdin>", "<attrs generated init m.C>"):
        assert not user_code.is_user_file(pseudo, everything), pseudo
        assert frames.is_internal({"file": pseudo, "line": 2, "user": True})  # not even when a worker says so


def test_by_path_alone_installed_packages_and_the_stdlib_are_not_the_users() -> None:
    assert user_code.is_user_file("/home/u/train.py", EMPTY)
    assert not user_code.is_user_file(TRAINER, EMPTY)
    assert not user_code.is_user_file("/usr/lib/python3.11/threading.py", EMPTY)
    assert not user_code.is_user_file("/usr/lib/python3/dist-packages/numpy/core.py", EMPTY)
    assert not user_code.is_user_file("/venv/lib/python3.11/site-packages/torch/_C.cpython-311-x86_64-linux-gnu.so")
    raydbg_file = str(Path(user_code.__file__).with_name("worker")) + "/session.py"
    assert not user_code.is_user_file(raydbg_file, Roots(dirs=("/",)))  # raydbg itself: never


def test_the_package_of_the_function_ray_runs_is_the_users_wherever_installed() -> None:
    roots = roots_of([(TRAINER, "trainer_pkg.train")])
    assert roots.packages == {"trainer_pkg"}
    assert roots.is_user(TRAINER) and roots.is_user(f"{SITE}/trainer_pkg/data/loader.py")
    assert roots.is_user(f"{SITE}/trainer_pkg/__init__.py")
    assert not roots.is_user(f"{SITE}/trainer_pkg_other/x.py") and not roots.is_user(f"{SITE}/torch/nn/module.py")
    assert roots.adds(TRAINER) and not roots.adds("/home/u/train.py")  # what a worker marks
    # Code Ray pickled by value from a `python -m trainer_pkg.launch` driver: `__main__`, the path names it.
    assert roots_of([(f"{SITE}/trainer_pkg/launch.py", "__main__")]).packages == {"trainer_pkg"}
    # Ray's own (its examples too) and the stdlib are never a package root; the file itself is.
    example = f"{SITE}/ray/train/examples/pytorch/mnist.py"
    ray_roots = roots_of([(example, "ray.train.examples.pytorch.mnist")])
    assert ray_roots.packages == frozenset() and ray_roots.is_user(example)
    assert not ray_roots.is_user(f"{SITE}/ray/train/v2/_internal/util.py")
    assert roots_of([("/usr/lib/python3.11/json/decoder.py", "json.decoder")]).packages == frozenset()


def test_raydbg_user_code_adds_packages_and_subpackages_and_says_what_it_cannot_read(
        caplog: pytest.LogCaptureFixture) -> None:
    names, bad = user_code.parse_packages(" pkg_a, team.train ,,not a name, 3d")
    assert names == {"pkg_a", "team.train"} and bad == ["not a name", "3d"]
    roots = Roots(packages=names)
    assert roots.is_user(f"{SITE}/pkg_a/x.py") and roots.is_user(f"{SITE}/team/train/loop.py")
    assert roots.is_user(f"{SITE}/team/train.py")  # the module itself
    assert not roots.is_user(f"{SITE}/team/trainer.py")  # a name that only begins alike
    assert not roots.is_user(f"{SITE}/team/data/loop.py")
    with caplog.at_level("WARNING", logger="raydbg"), pytest.MonkeyPatch.context() as env:
        env.setenv(user_code.USER_CODE_ENV, "ok_pkg, bad name")
        assert user_code.default_roots().packages == {"ok_pkg"}
    assert "RAYDBG_USER_CODE: 'bad name' is not a package name" in caplog.text


def test_installed_module_and_driver_dir() -> None:
    assert user_code.installed_module(f"{SITE}/pkg/sub/__init__.py") == "pkg.sub"
    assert user_code.installed_module(f"{SITE}/mod.py") == "mod"
    assert user_code.installed_module("/home/u/pkg/mod.py") is None
    assert user_code.driver_dir("/home/u/jobs/train.py") == "/home/u/jobs/"
    assert user_code.driver_dir(f"{SITE}/trainer_pkg/launch.py") == f"{SITE}/trainer_pkg/"  # python -m
    for none in (None, "<stdin>", f"{SITE}/ipykernel_launcher.py", "/usr/lib/python3.11/runpy.py",
                 f"{SITE}/ray/scripts/scripts.py"):
        assert user_code.driver_dir(none) is None, none


def test_a_class_of_an_installed_trainer_is_named_by_its_frames_not_by_the_library() -> None:
    stack = [{"function": "wait", "file": "/usr/lib/python3.11/threading.py", "line": 327},
             {"function": "get", "file": "/usr/lib/python3.11/queue.py", "line": 171},
             {"function": "_next_data", "file": f"{SITE}/torch/utils/data/dataloader.py", "line": 1328},
             {"function": "train_func", "file": TRAINER, "line": 76, "user": True},
             {"function": "train_fn", "file": f"{SITE}/ray/train/v2/_internal/util.py", "line": 90}]
    assert frames.summary(stack) == "wait <- train_func train.py:76"
    unmarked = [{k: v for k, v in f.items() if k != "user"} for f in stack]
    assert frames.summary(unmarked) == "wait threading.py:327 (library)"  # what path alone said (issue 39)
    worker = {"threads": [{"name": "MainThread", "frames": unmarked[:2]}, {"name": "Thread-3", "frames": stack}]}
    assert stack_classes.main_thread(worker)["name"] == "Thread-3"  # the thread with the user's frames


def test_the_driver_hands_its_directory_to_the_workers_roots(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    from types import SimpleNamespace

    from raydbg import activation

    launcher = f"{SITE}/trainer_pkg/launch.py"  # `python -m trainer_pkg.launch`
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace(__file__=launcher))
    monkeypatch.setenv(user_code.DRIVER_DIR_ENV, "/somewhere/inherited/")  # a parent's: never passed on
    assert activation.job_env()[user_code.DRIVER_DIR_ENV] == f"{SITE}/trainer_pkg/"
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace())  # a REPL, a notebook: none
    assert user_code.DRIVER_DIR_ENV not in activation.job_env()
    # In the worker: the directory is a root (its files the user's, installed or not).
    monkeypatch.setenv(user_code.DRIVER_DIR_ENV, f"{SITE}/trainer_pkg/")
    assert user_roots.current().is_user(f"{SITE}/trainer_pkg/model.py")
    monkeypatch.delenv(user_code.DRIVER_DIR_ENV)
    assert not user_roots.current().is_user(f"{SITE}/trainer_pkg/model.py")


# --- what Ray hands the work to, through Ray's own wrappers ------------------------------
def _module(name: str, file: str, source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": name}
    exec(compile(textwrap.dedent(source), file, "exec"), namespace)
    return namespace


def test_entry_points_look_through_rays_wrappers_into_the_users_function_only() -> None:
    user = _module("trainer_pkg.train", TRAINER, """
        import torch_like
        def train_func(config):
            return helper(config)
        def helper(config):
            return config
    """.replace("import torch_like", ""))
    ray_util = _module("ray.train.v2._internal.util", f"{SITE}/ray/train/v2/_internal/util.py", """
        import functools
        def construct(train_func):
            @functools.wraps(train_func)
            def train_fn():
                return train_func({})
            return train_fn
        def runner(target):
            def _run_target():
                return target()
            return _run_target
    """)
    target = ray_util["runner"](ray_util["construct"](user["train_func"]))
    assert user_code.entry_points([target]) == [(TRAINER, "trainer_pkg.train")]
    # A library's decorator (torch.no_grad's wrapper lives in torch) is looked through too:
    # torch never becomes the user's package.
    torch_like = _module("torch.utils._contextlib", f"{SITE}/torch/utils/_contextlib.py", """
        import functools
        def no_grad(fn):
            @functools.wraps(fn)
            def decorate_context(*args, **kwargs):
                return fn(*args, **kwargs)
            return decorate_context
    """)
    entries = user_code.entry_points([torch_like["no_grad"](user["train_func"])])
    assert entries == [(TRAINER, "trainer_pkg.train")] and roots_of(entries).packages == {"trainer_pkg"}
    assert user_code.entry_points([ray_util["runner"]]) == []  # nothing of the user's reached


def test_looking_for_roots_runs_none_of_the_jobs_code() -> None:
    called: list[str] = []

    class Sneaky:  # a callable the user handed Ray: attribute reads would run its code
        def __getattr__(self, name: str) -> Any:
            called.append(name)
            return lambda: None

        def __call__(self) -> None:
            return None

    ray_util = _module("ray.util", f"{SITE}/ray/util.py", """
        def runner(target):
            def _run_target():
                return target()
            return _run_target
    """)
    entries = user_code.entry_points([ray_util["runner"](Sneaky())])
    assert called == [] and entries == [(__file__, __name__)]  # found through its class, statically


def test_an_actors_class_is_found_under_the_class_ray_makes_of_it() -> None:
    user = _module("trainer_pkg.train", TRAINER, """
        class Trainer:
            def step(self):
                return 1
    """)
    ray_actor = _module("ray.actor", f"{SITE}/ray/actor.py", """
        def modify(cls):
            class Class(cls):
                def __ray_ready__(self):
                    return True
            return Class
    """)
    assert user_code.entry_points([ray_actor["modify"](user["Trainer"])]) == [(TRAINER, "trainer_pkg.train")]


def test_a_real_ray_train_thread_names_the_installed_loop_function(installed: ModuleType) -> None:
    """Ray Train V2's own wrappers (construct_train_func, ThreadRunner): the training thread's
    target reaches the user's function, whose package becomes a root."""
    from ray.train.v2._internal.execution.worker_group.thread_runner import ThreadRunner
    from ray.train.v2._internal.util import construct_train_func

    from raydbg import _ray_internals

    installed.STOP.clear()
    installed.GATE.set()
    runner = ThreadRunner()
    runner.run(construct_train_func(installed.train_func, None, _nothing))
    try:
        objects = _ray_internals.running_objects()
        entries = user_code.entry_points(objects)
        assert (installed.__file__, "trainer_pkg.loop") in entries, entries
        roots = user_roots.current()
        assert "trainer_pkg" in roots.packages and roots.is_user(installed.__file__)
    finally:
        installed.STOP.set()
        while runner.is_running():
            time.sleep(0.01)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# --- a pause in an installed trainer; a post-mortem's frame -------------------------------
TRAINER_SOURCE = '''
import threading

GATE = threading.Event()
STOP = threading.Event()
# A function made by exec, as dataclasses and namedtuple make theirs: its file is "<string>".
_ns = {}
exec(compile("def generated(gate):\\n    gate.wait(10)\\n    x = 1\\n    return x\\n", "<string>", "exec"), _ns)
generated = _ns["generated"]


def train_func():
    total = 0
    while not STOP.is_set():
        total += generated(GATE)  # blocked in the generated function's wait
        total += 1  # AFTER: where a pause stops
    return total


def fail(op):
    return op()  # CALLS LIBRARY
'''


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[ModuleType]:
    """trainer_pkg installed in a `site-packages` directory (its files really live there)."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "trainer_pkg").mkdir(parents=True)
    (site / "trainer_pkg" / "__init__.py").write_text("")
    (site / "trainer_pkg" / "loop.py").write_text(TRAINER_SOURCE)
    sys.path.insert(0, str(site))
    try:
        yield importlib.import_module("trainer_pkg.loop")
    finally:
        sys.path.remove(str(site))
        for name in [n for n in sys.modules if n == "trainer_pkg" or n.startswith("trainer_pkg.")]:
            del sys.modules[name]


def _line(module: ModuleType, mark: str) -> int:
    return next(i for i, text in enumerate(Path(str(module.__file__)).read_text().splitlines(), 1) if mark in text)


def test_pause_stops_in_the_installed_trainer_after_the_generated_frame_returns(
        installed: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    stopped: list[tuple[str, int]] = []
    monkeypatch.setattr(session, "pause", lambda frame, *a, **k: stopped.append((frame.f_code.co_filename,
                                                                                   frame.f_lineno)))
    monkeypatch.setattr(session, "publish_snapshot", lambda *a, **k: None)  # no registry here
    installed.GATE.clear()
    installed.STOP.clear()
    thread = threading.Thread(target=installed.train_func, name="TrainingThread(train_func)", daemon=True)
    thread.start()
    try:
        time.sleep(0.1)  # inside generated(): its wait, under the trainer's frame
        answer = on_demand.request()
        assert answer == {"thread": thread.name}, answer  # not "no thread ... runs Python work now"
        installed.GATE.set()  # the generated frame runs its next lines, returns: the stop is the trainer's
        deadline = time.monotonic() + 10
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stopped == [(installed.__file__, _line(installed, "# AFTER"))]
    finally:
        installed.STOP.set()
        installed.GATE.set()
        thread.join(5)


def test_a_post_mortem_names_the_users_line_not_the_library_that_raised(
        installed: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    library = _module("torch_like.ops", f"{SITE}/torch_like/ops.py", """
        import sys
        def op():
            raise ValueError("shapes do not match")
        def run(fn, arg):
            try:
                fn(arg)
            except ValueError:
                return sys.exc_info()
    """)
    # The traceback: run (library) -> fail (the installed trainer) -> op (library, raising).
    exc_info = library["run"](installed.fail, library["op"])
    tb = exc_info[2]
    while tb.tb_next is not None:
        tb = tb.tb_next
    raising: FrameType = tb.tb_frame
    monkeypatch.setenv(user_code.USER_CODE_ENV, "trainer_pkg")
    rec = session.build_record(raising, "exception", exc_info)
    assert (rec.file, rec.line, rec.function) == (installed.__file__, _line(installed, "# CALLS LIBRARY"), "fail")
    assert rec.exception is not None and "shapes do not match" in rec.exception.message
    # A snapshot's frames carry the mark the stacks carry (the TUI shows them as the user's).
    pictured = installed.fail(lambda: snapshot.frames_of(sys._getframe(1)))
    assert (pictured[0]["function"], pictured[0].get("user")) == ("fail", True)
    assert "user" not in pictured[1]  # this test's own frame: the user's by its path already
    monkeypatch.delenv(user_code.USER_CODE_ENV)
    rec = session.build_record(raising, "exception", exc_info)
    # Without the root no frame of the traceback is the user's: the raising one is named.
    assert (rec.file, rec.function) == (f"{SITE}/torch_like/ops.py", "op")
