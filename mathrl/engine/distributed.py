"""One entry point for a single process and for `torchrun --standalone --nproc_per_node=N`.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; without them the run is a world of one and
every collective below is the identity. gloo serves CPU runs and NCCL CUDA runs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mathrl.pipeline.errors import ConfigError


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """Rank 0 does all file and console output."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def pick_device(preference: str, local_rank: int = 0) -> torch.device:
    """`auto` takes CUDA when there is one; `cuda` without one is an error a user can act on."""
    if preference == "cpu" or (preference == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("device: 'cuda' was asked for but torch sees no CUDA device; use device=auto or device=cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def setup(preference: str = "auto") -> Dist:
    """Join the process group when launched by torchrun, else run as a world of one."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Dist(device=pick_device(preference))
    rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    device = pick_device(preference, local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        if attempt != "0" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            # torchrun's agent keeps its TCP store across restarts (torch issue #135712):
            # a restarted worker would read the dead attempt's addresses and fail to
            # connect, so each attempt gets keys of its own.
            agent_store = dist.TCPStore(
                os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False
            )
            store = dist.PrefixStore(f"mathrl/attempt{attempt}", agent_store)
            dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world)
        else:
            dist.init_process_group(backend=backend)
    return Dist(rank, world, local, device)


def teardown(d: Dist) -> None:
    if d.active and dist.is_initialized():
        dist.destroy_process_group()


def all_sum(d: Dist, values: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks (a copy; the identity for a world of one)."""
    out = values.detach().clone()
    if d.active:
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def all_mean_std(d: Dist, x: torch.Tensor, weight: torch.Tensor) -> tuple[float, float]:
    """The weighted mean and population std of `x` over every rank's entries (weight 0 leaves
    an entry out): from the all-reduced sums of w, w x and w x^2."""
    t = all_sum(d, torch.stack([(x * weight).sum(), (x * x * weight).sum(), weight.sum()]).double().cpu())
    mean = float(t[0] / t[2])
    return mean, math.sqrt(max(float(t[1] / t[2]) - mean * mean, 0.0))


def all_max(d: Dist, values: torch.Tensor) -> torch.Tensor:
    out = values.detach().clone()
    if d.active:
        dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out


def barrier(d: Dist) -> None:
    if d.active:
        dist.barrier()
