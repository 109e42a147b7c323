"""The policy that samples rollouts, which may differ from the policy being trained.

With the defaults (float32, no staleness) the sampler is the trainer's own policy. A lower
precision (`sampler_dtype`) samples with a copy of the current weights cast to that dtype, as
an inference engine in bf16 or fp16 would; `rollout_staleness: k` samples with the weights of
k updates ago, as asynchronous RL does (the first k steps use the weights of step 1). Both
keep a copy of the policy; staleness also keeps the last k + 1 weight sets (in the snapshot,
so a resumed run samples what an uninterrupted one does). Truncated sampling (top-k, top-p)
is an argument of `GPT.generate`.

`sampler_logprobs` is what the sampler records of each token it sampled: its log-probability
under the distribution it sampled from (tempered and truncated).

On a CPU the reduced-precision sampler's linear layers run as `ReducedLinearInFloat32`: the
products of the bf16 (fp16) values and their sum in float32, the result rounded once to bf16
(fp16), which is what a bf16 GEMM computes (a GPU's, or torch's own CPU kernel), up to the
order of the sum. Torch's CPU kernel is about 20 times slower than float32 on CPUs without
native bf16 matrix units; on CUDA the sampler runs the device's own bf16 kernels.
"""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from mathrl.engine.losses import token_logprobs
from mathrl.engine.model import GPT, truncate_logits

SAMPLER_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def sampler_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Log-probability of each sampled token under the sampling distribution: logits (B, T, V)
    of the sampler (untempered, as `GPT.generate` returns them), tokens (B, T) -> (B, T) float32."""
    return token_logprobs(truncate_logits(logits.float() / temperature, top_k, top_p), tokens)


class ReducedLinearInFloat32(TorchFunctionMode):
    """`F.linear` of bf16 or fp16 CPU tensors computed as a GEMM in that precision computes it: inputs, weights and
    bias exact in float32 (every bf16 or fp16 value is), products summed in float32, the result rounded once."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and args[0].dtype in (torch.bfloat16, torch.float16) and args[0].device.type == "cpu":
            x, weight, *rest = args
            bias = kwargs.get("bias", rest[0] if rest else None)
            out = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
            return out.to(x.dtype)
        return func(*args, **kwargs)


class RolloutSampler:
    """Which weights, in which precision, sample a step's rollouts."""

    def __init__(self, policy: GPT, dtype: str = "float32", staleness: int = 0):
        if dtype not in SAMPLER_DTYPES:
            raise ValueError(f"sampler_dtype={dtype!r}; allowed: {', '.join(SAMPLER_DTYPES)}")
        if staleness < 0:
            raise ValueError(f"rollout_staleness={staleness} must be >= 0")
        self.staleness = staleness
        self.history: list[dict[str, torch.Tensor]] = []  # the last staleness + 1 weight sets, oldest first
        own = dtype != "float32" or staleness > 0
        self.model = copy.deepcopy(policy).to(SAMPLER_DTYPES[dtype]).eval().requires_grad_(False) if own else None

    def policy_for_step(self, current: GPT) -> GPT:
        """The model that samples this step's rollouts; call once per step, before its first rollout."""
        if self.model is None:
            return current
        self.history.append({k: v.detach().clone() for k, v in current.state_dict().items()})
        self.history = self.history[-(self.staleness + 1) :]
        self.model.load_state_dict(self.history[0])  # copy_ casts to the sampler's dtype
        return self.model

    def kernels(self, device) -> contextlib.AbstractContextManager:
        """The context to sample in: on a CPU, a reduced-precision sampler's linear layers as
        `ReducedLinearInFloat32`; otherwise nothing changes."""
        reduced = self.model is not None and self.model.lm_head.weight.dtype != torch.float32
        return ReducedLinearInFloat32() if reduced and torch.device(device).type == "cpu" else contextlib.nullcontext()

    def state_dict(self) -> dict:
        return {"history": self.history}

    def load_state_dict(self, state: dict) -> None:
        self.history = list(state.get("history", []))
