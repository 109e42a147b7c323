"""The starting checkpoint's evaluation, kept beside it under a content key (mathrl.engine.eval_cache)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import torch

from mathrl.engine import eval_cache
from mathrl.engine.model import GPT, gpt_config
from mathrl.engine.tasks import VOCAB_SIZE, Task

TASK = Task("add", 2)
SPEC = {"op": "add", "ndigit": 2}
PAIRS = torch.tensor([[a, b] for a in range(0, 99, 7) for b in range(3, 99, 11)])


def model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(gpt_config("small", VOCAB_SIZE, TASK.seq_len))


def test_key_changes_with_checkpoint_eval_set_and_settings():
    key = eval_cache.cache_key("abc", SPEC, PAIRS, 1.0, "cpu")
    assert key == eval_cache.cache_key("abc", dict(SPEC), PAIRS.clone(), 1.0, "cpu")  # content, not identity
    others = [
        eval_cache.cache_key("abd", SPEC, PAIRS, 1.0, "cpu"),  # another checkpoint
        eval_cache.cache_key("abc", SPEC, PAIRS[:-1], 1.0, "cpu"),  # a smaller eval set
        eval_cache.cache_key("abc", SPEC, PAIRS.flip(0), 1.0, "cpu"),  # the same problems in another order
        eval_cache.cache_key("abc", {**SPEC, "ndigit": 3}, PAIRS, 1.0, "cpu"),  # another task
        eval_cache.cache_key("abc", SPEC, PAIRS, 0.7, "cpu"),  # another temperature
        eval_cache.cache_key("abc", SPEC, PAIRS, 1.0, "cuda"),
    ]
    assert len({key, *others}) == len(others) + 1


def test_computed_once_then_read_and_equal_to_a_direct_evaluation(tmp_path):
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"weights")
    m = model()
    first = eval_cache.initial_evaluation(ckpt, "d1", m, TASK, SPEC, PAIRS, 1.0, "cpu")
    second = eval_cache.initial_evaluation(ckpt, "d1", m, TASK, SPEC, PAIRS, 1.0, "cpu")
    assert first.computed and not second.computed
    assert (second.greedy, second.sampled_hits) == (first.greedy, first.sampled_hits)
    greedy, hits = eval_cache.compute(m, TASK, PAIRS, 1.0, "cpu")
    assert (greedy, hits) == (first.greedy, first.sampled_hits)
    assert len(list((tmp_path / "evaluations").glob("*.json"))) == 1
    # another checkpoint (other digest) is evaluated afresh, beside the first entry
    third = eval_cache.initial_evaluation(ckpt, "d2", model(1), TASK, SPEC, PAIRS, 1.0, "cpu")
    assert third.computed and len(list((tmp_path / "evaluations").glob("*.json"))) == 2


def test_a_broken_or_foreign_entry_is_computed_again(tmp_path):
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"weights")
    key = eval_cache.cache_key("d1", SPEC, PAIRS, 1.0, "cpu")
    path = eval_cache.cache_path(ckpt, key)
    path.parent.mkdir()
    path.write_text('{"key": "')  # a torn file (what a non-atomic writer could leave)
    got = eval_cache.initial_evaluation(ckpt, "d1", model(), TASK, SPEC, PAIRS, 1.0, "cpu")
    assert got.computed and json.loads(path.read_text())["key"] == key
    entry = json.loads(path.read_text())
    path.write_text(json.dumps({**entry, "key": "another"}))
    assert eval_cache.initial_evaluation(ckpt, "d1", model(), TASK, SPEC, PAIRS, 1.0, "cpu").computed


def _evaluate(ckpt: str, queue) -> None:
    torch.set_num_threads(1)
    got = eval_cache.initial_evaluation(Path(ckpt), "d1", model(), TASK, SPEC, PAIRS, 1.0, "cpu")
    queue.put((got.greedy, got.sampled_hits))


def test_concurrent_writers_leave_one_whole_entry(tmp_path):
    """Four processes evaluate the same checkpoint at once: each gets the same result and the
    file left is whole and readable (no reader ever sees a partial one)."""
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"weights")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_evaluate, args=(str(ckpt), queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(r == results[0] for r in results)
    files = list((tmp_path / "evaluations").iterdir())
    assert len(files) == 1  # no temporary file left behind
    key = eval_cache.cache_key("d1", SPEC, PAIRS, 1.0, "cpu")
    found = eval_cache.read(files[0], key, len(PAIRS))
    assert found is not None and (found.greedy, found.sampled_hits) == results[0]


def test_initial_pass_at_k_is_shared_by_a_seed_and_not_across_seeds(tmp_path):
    ckpt = tmp_path / "model.pt"
    calls = []

    def count(value):
        def run():
            calls.append(value)
            return [value] * len(PAIRS)

        return run

    first = eval_cache.initial_pass_at_k(ckpt, "abc", SPEC, PAIRS, 8, 1.0, 0, "cpu", count(3))
    again = eval_cache.initial_pass_at_k(ckpt, "abc", SPEC, PAIRS, 8, 1.0, 0, "cpu", count(5))  # another arm, seed 0
    other_seed = eval_cache.initial_pass_at_k(ckpt, "abc", SPEC, PAIRS, 8, 1.0, 1, "cpu", count(4))
    more_samples = eval_cache.initial_pass_at_k(ckpt, "abc", SPEC, PAIRS, 16, 1.0, 0, "cpu", count(6))
    assert first == again == [3] * len(PAIRS) and calls == [3, 4, 6]
    assert other_seed == [4] * len(PAIRS) and more_samples == [6] * len(PAIRS)
    assert len(list((tmp_path / "evaluations").glob("model-passk-*.json"))) == 3
