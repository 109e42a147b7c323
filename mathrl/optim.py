"""AdamW through torch's fused kernel, without the torch.optim machinery.

Every torch.optim optimizer imports torch._dynamo on its first call (its methods are
wrapped to keep the compiler out), which costs about 1.4 s per process on our CPUs; the
default study grid starts over a hundred short training processes. This class calls the
kernel that `torch.optim.AdamW(fused=True)` calls (`torch._fused_adamw_`, on CPU and CUDA),
so one step updates the weights exactly as that optimizer does; tests/test_optim.py checks
them against each other step by step, and that a run never imports torch._dynamo.

Only what the trainer needs: one parameter group of same-device float tensors, `lr` in
`param_groups[0]` (schedules change it between steps), `state_dict()` for snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

STATE_FORMAT = "mathrl.AdamW/1"


class AdamW:
    """Decoupled weight-decay Adam (Loshchilov and Hutter), torch.optim.AdamW's defaults."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):  # fmt: skip
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("AdamW: no trainable parameters")
        kinds = {(p.device, p.dtype) for p in self.params}
        if len(kinds) > 1:
            raise ValueError(f"AdamW: parameters must share one device and dtype, got {sorted(map(str, kinds))}")
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamW: invalid hyperparameters lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}")
        self.param_groups = [{"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}]
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        # Per-parameter step counts, as tensors on the parameters' device (the kernel's layout).
        self.steps = [torch.zeros((), dtype=torch.float32, device=p.device) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient (others keep their state)."""
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        steps = [self.steps[i] for i in live]
        torch._foreach_add_(steps, 1)
        torch._fused_adamw_(
            [self.params[i] for i in live], [self.params[i].grad for i in live],
            [self.exp_avg[i] for i in live], [self.exp_avg_sq[i] for i in live], [], steps,
            lr=float(group["lr"]), beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"],
            eps=group["eps"], amsgrad=False, maximize=False,
        )  # fmt: skip

    def state_dict(self) -> dict:
        return {
            "format": STATE_FORMAT, "param_groups": [dict(g) for g in self.param_groups],
            "exp_avg": [t.clone() for t in self.exp_avg], "exp_avg_sq": [t.clone() for t in self.exp_avg_sq],
            "steps": [t.clone() for t in self.steps],
        }  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(f"optimizer state is not {STATE_FORMAT} (written by another version of mathrl?)")
        shapes = [tuple(p.shape) for p in self.params]
        if [tuple(t.shape) for t in state["exp_avg"]] != shapes:
            raise ValueError("optimizer state holds other parameter shapes than this model")
        self.param_groups = [dict(g) for g in state["param_groups"]]
        for mine, saved in ((self.exp_avg, state["exp_avg"]), (self.exp_avg_sq, state["exp_avg_sq"]), (self.steps, state["steps"])):
            for dst, src in zip(mine, saved, strict=True):
                dst.copy_(src)
