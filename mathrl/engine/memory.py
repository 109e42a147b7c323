"""How much memory one RL step needs, estimated from the model and the batch before a run
starts, so that a batch too large for the machine is refused in one line, with the numbers,
instead of failing mid-step (or swapping) after the warm-up model has loaded.

An estimate in float32 bytes of the largest terms, not a measurement: the sampling noise
(drawn for the whole global batch on every rank), the KV cache of generation, the largest
intermediate of a no-grad forward over the rank's batch (reference and old log-probs), and
the activations a training forward keeps for backward over one micro-batch."""

from __future__ import annotations

FLOAT = 4  # bytes


def step_memory(
    *,
    batch_size: int,
    world_size: int,
    micro_batch_size: int,
    group_size: int,
    prompt_len: int,
    answer_len: int,
    vocab_size: int,
    n_layer: int,
    n_head: int,
    n_embd: int,
) -> dict[str, int]:
    """Bytes per term of one step, and their sum under "total"."""
    rows = batch_size // world_size  # this rank's rollouts
    micro = micro_batch_size or rows
    T = prompt_len + answer_len  # tokens per sequence
    # the forwards take a group's prompt once when micro-batches hold whole groups (prefix sharing)
    t = (prompt_len + group_size * (answer_len - 1)) / group_size if micro % group_size == 0 else T - 1
    noise = batch_size * answer_len * vocab_size * FLOAT  # (B_global, L, V)
    kv_cache = 2 * n_layer * rows * T * n_embd * FLOAT  # keys and values of every layer
    # no grad: one layer's widest tensors at a time (qkv, MLP hidden, attention scores) and the logits
    forward = round(rows * t * (3 * n_embd + 4 * n_embd + n_head * T + vocab_size) * FLOAT)
    # with grad: every layer keeps its inputs, qkv, attention probabilities, MLP hidden and norms
    training = round(micro * t * (n_layer * (16 * n_embd + 2 * n_head * T) + 3 * vocab_size) * FLOAT)
    terms = {"noise": noise, "kv_cache": kv_cache, "forward": forward, "training": training}
    return {**terms, "total": sum(terms.values())}


def size(n: float) -> str:
    """Bytes for people: `12 MiB`, `3.0 GiB`."""
    return f"{n / 2**20:.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"
