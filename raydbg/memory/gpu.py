"""GPU memory per device and per process via NVML (nvidia-ml-py), absent without a GPU."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    used: int
    total: int


@dataclass(frozen=True)
class GpuMemory:
    devices: tuple[GpuDevice, ...]
    per_pid: dict[int, int] = field(default_factory=dict)  # pid -> bytes on all devices

    def to_dict(self) -> list[dict[str, object]]:
        return [
            {"index": d.index, "name": d.name, "uuid": d.uuid, "used": d.used, "total": d.total}
            for d in self.devices
        ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuReader:
    """Reads NVML; `read()` returns None when there is no driver or no device.

    `nvml` is injectable (tests pass a fake module); the real one is imported lazily
    and a failed init is remembered so a GPU-less node pays for it once.
    """

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml
        self._ok: bool | None = None

    def _init(self) -> bool:
        if self._ok is None:
            try:
                if self._nvml is None:
                    import pynvml

                    self._nvml = pynvml
                self._nvml.nvmlInit()
                self._ok = self._nvml.nvmlDeviceGetCount() > 0
            except Exception:  # no library, no driver, no permission: no GPU for us
                self._ok = False
        return self._ok

    def read(self) -> GpuMemory | None:
        if not self._init():
            return None
        nv = self._nvml
        devices: list[GpuDevice] = []
        per_pid: dict[int, int] = {}
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                info = nv.nvmlDeviceGetMemoryInfo(h)
                devices.append(
                    GpuDevice(
                        i,
                        _text(nv.nvmlDeviceGetName(h)),
                        _text(nv.nvmlDeviceGetUUID(h)),
                        int(info.used),
                        int(info.total),
                    )
                )
                try:
                    procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
                except Exception:  # not supported on some devices/drivers
                    procs = []
                for p in procs:
                    used = p.usedGpuMemory
                    # NVML reports None/huge when per-process accounting is unavailable.
                    if used is None or used >= (1 << 60):
                        continue
                    per_pid[int(p.pid)] = per_pid.get(int(p.pid), 0) + int(used)
        except Exception:
            return None
        return GpuMemory(tuple(devices), per_pid)

    def close(self) -> None:
        if self._ok:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
        self._ok = None
