"""The optimizer of a run, by name: torch's own AdamW or SGD.

AdamW uses torch's fused kernel where the parameters' device has one (CPU and CUDA): one
kernel per step instead of a loop over parameter tensors. torch.optim imports
torch._dynamo on an optimizer's first step (about 1.4 s of CPU here); the fork server
imports it once, before it forks any run (`PRELOAD` below, read by mathrl.pipeline.forkserver's
caller), so a forked run pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

OPTIMIZERS = ("adamw", "sgd")
# Modules a torch.optim step imports lazily; a process that forks runs imports them first.
PRELOAD = ("torch.optim", "torch._dynamo")


def make_optimizer(
    params: Iterable[torch.Tensor],
    name: str,
    lr: float,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.0,
) -> torch.optim.Optimizer:
    """`name` is adamw (decoupled weight decay, Loshchilov and Hutter) or sgd (with
    `momentum` and L2 weight decay). `betas` is AdamW's, `momentum` SGD's."""
    params = [p for p in params if p.requires_grad]
    if name == "adamw":
        fused = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in params)
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay, fused=fused or None)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"optimizer: {name!r} is not allowed; allowed: {', '.join(OPTIMIZERS)}")


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """The learning rate of every parameter group (schedules change it between steps)."""
    for group in opt.param_groups:
        group["lr"] = lr
