"""AdamW for the UNet, in the fastest implementation the device has: fused, else foreach.

torch picks the slow per-parameter loop by itself for FSDP2's DTensor parameters
(its default only considers plain tensors), so the choice is made here explicitly.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

OPTIMIZER_IMPLS = ("auto", "fused", "foreach", "for-loop")


def fused_supported(device_type: str) -> bool:
    """Whether torch has fused optimizer kernels for this device type (cuda, cpu, ...)."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    return device_type in _get_fused_kernels_supported_devices()


def resolve_impl(impl: str, device_type: str) -> str:
    """The implementation `impl` means on this device: auto = fused where supported, else foreach."""
    if impl not in OPTIMIZER_IMPLS:
        raise ValueError(f"optimizer implementation {impl!r} not in {OPTIMIZER_IMPLS}")
    if impl == "auto":
        return "fused" if fused_supported(device_type) else "foreach"
    if impl == "fused" and not fused_supported(device_type):
        raise ValueError(f"fused AdamW has no kernel for {device_type} in this torch: use --optimizer foreach")
    return impl


def adamw(params: Iterable[torch.Tensor], lr: float, weight_decay: float, impl: str, device_type: str) -> torch.optim.AdamW:
    """AdamW over `params` with the implementation `impl` resolves to on `device_type`."""
    chosen = resolve_impl(impl, device_type)
    if chosen == "fused":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=chosen == "foreach")


def reapply(optimizer: torch.optim.Optimizer, impl: str, device_type: str) -> None:
    """After loading a checkpoint: its param groups bring the kernel flags they were saved with; use ours.

    The fused kernel keeps each parameter's step count as a float32 tensor on the
    parameter's device, the others as a CPU tensor: move them to match.
    """
    chosen = resolve_impl(impl, device_type)
    for group in optimizer.param_groups:
        group["fused"] = True if chosen == "fused" else None
        group["foreach"] = chosen == "foreach" if chosen != "fused" else None
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            step = state.get("step")
            if isinstance(step, torch.Tensor):
                device = p.device if chosen == "fused" else torch.device("cpu")
                state["step"] = step.to(device=device, dtype=torch.float32)


def implementation(optimizer: torch.optim.Optimizer) -> str:
    """Which implementation an optimizer runs (for the log)."""
    group = optimizer.param_groups[0]
    return "fused" if group.get("fused") else "foreach" if group.get("foreach") else "for-loop"
