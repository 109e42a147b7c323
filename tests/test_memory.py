"""The step-memory estimate, checked by hand on a small case."""

from mathrl.engine.memory import size, step_memory

SMALL = {"prompt_len": 3, "answer_len": 2, "vocab_size": 5, "n_layer": 1, "n_head": 2, "n_embd": 4}


def test_step_memory_by_hand():
    m = step_memory(batch_size=8, world_size=2, micro_batch_size=2, group_size=2, **SMALL)
    # 4 rows per rank, T = 5 tokens; a shared prompt: (3 + 2 x 1) / 2 = 2.5 token rows per rollout
    assert m["noise"] == 8 * 2 * 5 * 4
    assert m["kv_cache"] == 2 * 1 * 4 * 5 * 4 * 4
    assert m["forward"] == 4 * 2.5 * (12 + 16 + 2 * 5 + 5) * 4
    assert m["training"] == 2 * 2.5 * (1 * (64 + 2 * 2 * 5) + 15) * 4
    assert m["total"] == m["noise"] + m["kv_cache"] + m["forward"] + m["training"]
    whole = step_memory(batch_size=8, world_size=2, micro_batch_size=0, group_size=2, **SMALL)
    assert whole["training"] == 2 * m["training"]  # no micro-batches: the rank's 4 rows at once
    unshared = step_memory(batch_size=8, world_size=2, micro_batch_size=3, group_size=2, **SMALL)
    assert unshared["training"] == 3 * 4 * (1 * (64 + 2 * 2 * 5) + 15) * 4  # full sequences of T - 1 tokens
    assert (size(3 * 2**30), size(5 * 2**20)) == ("3.0 GiB", "5 MiB")
