"""The held-out evaluation of a starting checkpoint, computed once and kept beside it.

Every RL run that starts from the same warm-up evaluated the same checkpoint on the same
held-out problems before its first step. `initial_evaluation` does it once per checkpoint,
evaluation set and evaluation settings, and stores the result as JSON beside the checkpoint,
`<checkpoint dir>/evaluations/<checkpoint stem>-<key>.json`. The key is a hash of all the
result depends on: the checkpoint's bytes, the held-out problems and the task that encodes
them, the sampling temperature and seed, the device type, and `EVAL_VERSION` (raised when
the evaluation code changes what it computes). A new checkpoint, another evaluation set or
another temperature is another key, so a stored result is never read for what it was not
computed on.

The greedy answers are those the run computed itself before. The sampled answer of each
problem is drawn with noise from `SAMPLED_SEED`, the same for every run: the starting
sampled accuracy is a property of the checkpoint (and temperature), no longer of the run's
seed. (A run of seed 0 drew its noise from this seed before, so its value is unchanged.)

Parallel runs: the file is written atomically (a temporary file renamed over it), so a
reader sees no file or a whole one; two runs that compute it at once write the same bytes
and the later rename wins. A file that does not parse, or names another key, is computed
again and replaced.

pass@k before RL (`initial_pass_at_k`) is kept the same way, one entry per checkpoint,
evaluation set, samples per problem, temperature and seed: its noise is the run's seed's, so
the arms of one seed share it and the counts are those each run would have sampled.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mathrl.engine.evaluation import greedy_correct, sampled_correct
from mathrl.engine.tasks import VOCAB_SIZE, Task
from mathrl.pipeline.atomic import atomic_write

EVAL_VERSION = 1  # what an entry means; raise it when the evaluation computes something else
SAMPLED_SEED = 0  # the seed of the sampled answers' noise (a run's evaluation at step 0 drew seed*100003 + 0)


@dataclass(frozen=True)
class InitialEvaluation:
    """Greedy correctness (0/1) of each held-out problem, the sampled answers' hits, the
    seconds the evaluation took to compute, and whether this call computed it."""

    greedy: list[int]
    sampled_hits: int
    compute_seconds: float
    computed: bool

    @property
    def greedy_accuracy(self) -> float:
        return float(torch.tensor(self.greedy, dtype=torch.float64).mean())

    @property
    def sampled_accuracy(self) -> float:
        return self.sampled_hits / len(self.greedy)


def cache_key(
    checkpoint_digest: str, task_spec: dict, pairs: torch.Tensor, temperature: float, device_type: str
) -> str:
    """The content key of one evaluation: a hash of everything its result depends on."""
    h = hashlib.sha256()
    inputs = {
        "version": EVAL_VERSION,
        "checkpoint": checkpoint_digest,
        "task": task_spec,
        "temperature": float(temperature),
        "sampled_seed": SAMPLED_SEED,
        "device": device_type,
    }
    h.update(json.dumps(inputs, sort_keys=True, default=str).encode())
    h.update(pairs.to(torch.int64).contiguous().numpy().tobytes())
    return h.hexdigest()[:20]


def cache_path(checkpoint: Path, key: str) -> Path:
    return Path(checkpoint).parent / "evaluations" / f"{Path(checkpoint).stem}-{key}.json"


def compute(model, task: Task, pairs: torch.Tensor, temperature: float, device) -> tuple[list[int], int]:
    """Greedy correctness per problem and the sampled answers' hits, all problems on this process."""
    greedy = greedy_correct(model, task, pairs, device)
    noise = torch.rand(len(pairs), task.answer_len, VOCAB_SIZE, generator=torch.Generator().manual_seed(SAMPLED_SEED))
    sampled = sampled_correct(model, task, pairs, device, noise, temperature)
    return [int(v) for v in greedy.tolist()], int(sampled.sum())


def read(path: Path, key: str, n: int) -> InitialEvaluation | None:
    """The stored evaluation at `path`, or None if there is none (or it is unreadable or another's)."""
    try:
        entry = json.loads(path.read_text())
        greedy = [int(c) for c in entry["greedy"]]
        if entry["key"] != key or len(greedy) != n:
            return None
        return InitialEvaluation(greedy, int(entry["sampled_hits"]), float(entry["compute_seconds"]), computed=False)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def initial_evaluation(
    checkpoint: Path,
    checkpoint_digest: str,
    model,
    task: Task,
    task_spec: dict,
    pairs: torch.Tensor,
    temperature: float,
    device,
) -> InitialEvaluation:
    """The starting checkpoint's evaluation on `pairs`: read from beside the checkpoint, or
    computed (on `model`, the checkpoint's policy) and stored there."""
    key = cache_key(checkpoint_digest, task_spec, pairs, temperature, torch.device(device).type)
    path = cache_path(checkpoint, key)
    found = read(path, key, len(pairs))
    if found is not None:
        return found
    t0 = time.perf_counter()
    greedy, hits = compute(model, task, pairs, temperature, device)
    seconds = time.perf_counter() - t0
    entry = {
        "key": key,
        "checkpoint": str(checkpoint),
        "checkpoint_sha256": checkpoint_digest,
        "problems": len(pairs),
        "temperature": float(temperature),
        "sampled_seed": SAMPLED_SEED,
        "version": EVAL_VERSION,
        "greedy": "".join(map(str, greedy)),
        "sampled_hits": hits,
        "compute_seconds": seconds,
    }
    try:
        atomic_write(path, json.dumps(entry, indent=1) + "\n")
    except OSError:
        pass  # a read-only checkpoint directory: the run goes on with what it computed
    return InitialEvaluation(greedy, hits, seconds, computed=True)


def initial_pass_at_k(
    checkpoint: Path,
    checkpoint_digest: str,
    task_spec: dict,
    pairs: torch.Tensor,
    samples: int,
    temperature: float,
    seed: int,
    device,
    count,
) -> list[int]:
    """pass@k's correct samples per problem on the starting checkpoint: read from beside it, or
    `count()` (the run's own sampling, with the noise of its `seed`) and stored there. Runs of one
    seed from one checkpoint (an experiment's arms) draw the same noise, so they share one entry."""
    h = hashlib.sha256(cache_key(checkpoint_digest, task_spec, pairs, temperature, torch.device(device).type).encode())
    h.update(json.dumps({"pass_at_k_samples": int(samples), "seed": int(seed)}).encode())
    key = "passk-" + h.hexdigest()[:20]
    path = cache_path(checkpoint, key)
    try:
        entry = json.loads(path.read_text())
        if entry["key"] == key and len(entry["counts"]) == len(pairs):
            return [int(c) for c in entry["counts"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    counts = [int(c) for c in count()]
    entry = {
        "key": key,
        "checkpoint": str(checkpoint),
        "checkpoint_sha256": checkpoint_digest,
        "problems": len(pairs),
        "samples": int(samples),
        "temperature": float(temperature),
        "seed": int(seed),
        "version": EVAL_VERSION,
        "counts": counts,
    }
    try:
        atomic_write(path, json.dumps(entry) + "\n")
    except OSError:
        pass
    return counts
