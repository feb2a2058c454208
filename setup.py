"""Adds raydbg_activate.pth to the wheel: RAY_DEBUG=1 then works with no code change, and
Ray workers take raydbg at their first task when their job activated it."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

# One line, executed by site.py at every interpreter start: cheap, and silent if raydbg is gone.
# A Ray worker is recognised as in raydbg._ray_internals.is_worker_process (not imported here:
# a process a worker starts would pay raydbg's imports).
PTH = (
    "import os, sys; (os.environ.get('RAY_DEBUG', '').strip().lower() in "
    "('1', 'true', 'yes', 'on', 'raydbg') or ('RAY_RAYLET_PID' in os.environ and "
    "str((getattr(sys, 'argv', None) or [''])[0]).endswith('default_worker.py'))) "
    "and os.environ.get('RAYDBG_DISABLE') != '1' and __import__('importlib.util').util.find_spec('raydbg') "
    "and __import__('raydbg._pth_hook')\n"
)


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        target = os.path.join(self.build_lib, "raydbg_activate.pth")
        with open(target, "w") as f:
            f.write(PTH)

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, "raydbg_activate.pth")]


class EditableWheelWithPth(editable_wheel):
    # `pip install -e .` builds no package files; put the .pth in the wheel root ourselves.
    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):  # type: ignore[no-untyped-def]
        result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
        with open(os.path.join(unpacked_wheel, "raydbg_activate.pth"), "w") as f:
            f.write(PTH)
        return result


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
