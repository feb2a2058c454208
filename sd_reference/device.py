"""The training device: which one, TF32, synchronisation for honest timings, peak memory.

Everything device-specific that the loop, the metrics and the GPU benchmark share;
on CPU each helper is a no-op or answers None.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def pick(use_gpu: bool | None, local_rank: int = 0) -> torch.device:
    """cuda:<local rank> when CUDA is there and not refused, else the CPU."""
    if torch.cuda.is_available() and use_gpu is not False:
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)  # NCCL object collectives use the current device
        return device
    return torch.device("cpu")


def enable_tf32(device: torch.device, enabled: bool = True) -> None:
    """TF32 for float32 matmuls on GPU (cuDNN convolutions use TF32 by default)."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high" if enabled else "highest")


def synchronizer(device: torch.device) -> Callable[[], None] | None:
    """A function that waits for the device's queued work, or None where there is no queue (CPU)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return None


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(device: torch.device) -> float | None:
    """Peak bytes torch allocated on the device since the last reset, in GiB (None on CPU)."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2)


def name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
