"""The rollout/trainer mismatch: its diagnostics and corrections checked by hand, truncated
sampling, the sampler's weights, and the fp32 control against each source on real runs."""

from __future__ import annotations

import contextlib
import math

import pandas as pd
import pytest
import torch

from mathrl.engine.mismatch import (
    correction,
    importance_weights,
    mismatch_max,
    mismatch_metrics,
    mismatch_sums,
    sequence_mask_weights,
    token_mask_weights,
    truncated_weights,
)
from mathrl.engine.model import GPT, GPTConfig, truncate_logits
from mathrl.engine.sampler import ReducedLinearInFloat32, RolloutSampler, sampler_logprobs
from mathrl.pipeline.cli import main

LN2 = math.log(2.0)


def metrics_of(trainer, sampler, mask):
    t, s, m = torch.tensor(trainer), torch.tensor(sampler), torch.tensor(mask)
    return {**mismatch_metrics(mismatch_sums(t, s, m)), "mismatch_logp_diff_max": mismatch_max(t, s, m)}


# ---------------------------------------------------------------- diagnostics by hand
def test_weights_two_and_a_half_give_the_hand_computed_diagnostics():
    # d = trainer - sampler = +ln 2, -ln 2 (w = 2, 0.5); the third token is masked out (its d of 9 ignored)
    out = metrics_of([[-1.0 + LN2, -2.0 - LN2, 8.0]], [[-1.0, -2.0, -1.0]], [[1.0, 1.0, 0.0]])
    assert out["mismatch_logp_diff_mean"] == pytest.approx(LN2)
    assert out["mismatch_logp_diff_max"] == pytest.approx(LN2)
    # k3 = mean of (w - 1 - d): (2 - 1 - ln 2 + 0.5 - 1 + ln 2) / 2 = 0.25
    assert out["mismatch_kl_k3"] == pytest.approx(0.25)
    assert out["mismatch_chi2"] == pytest.approx((4 + 0.25) / 2 - 1)  # E[w²] - 1 = 1.125
    assert out["mismatch_ess"] == pytest.approx(2.5**2 / (2 * 4.25))  # (Σw)² / (n Σw²) = 0.735
    assert out["mismatch_logp_corr"] == pytest.approx(1.0)  # two points lie on a line


def test_correlation_of_three_tokens_by_hand():
    # centred: sampler (1, 0, -1), trainer (1, -1, 0): cov 1/3, both variances 2/3 -> 0.5
    out = metrics_of([[-1.0, -3.0, -2.0]], [[-1.0, -2.0, -3.0]], [[1.0, 1.0, 1.0]])
    assert out["mismatch_logp_corr"] == pytest.approx(0.5)


def test_equal_log_probs_are_no_mismatch_and_no_tokens_are_nan():
    out = metrics_of([[-0.5, -1.5]], [[-0.5, -1.5]], [[1.0, 1.0]])
    for name in ("mismatch_logp_diff_mean", "mismatch_logp_diff_max", "mismatch_kl_k3", "mismatch_chi2"):
        assert out[name] == 0, name
    assert out["mismatch_ess"] == 1.0
    empty = mismatch_metrics(mismatch_sums(torch.tensor([[-0.5]]), torch.tensor([[-0.7]]), torch.tensor([[0.0]])))
    assert all(math.isnan(v) for v in empty.values())


def test_sums_of_parts_add_up_to_the_sums_of_the_whole():
    gen = torch.Generator().manual_seed(0)
    t, s = -torch.rand(6, 4, generator=gen), -torch.rand(6, 4, generator=gen)
    m = (torch.rand(6, 4, generator=gen) > 0.3).float()
    parts = mismatch_sums(t[:2], s[:2], m[:2]) + mismatch_sums(t[2:], s[2:], m[2:])
    torch.testing.assert_close(parts, mismatch_sums(t, s, m))


def test_step_metrics_reduce_the_sums_of_micro_batches_to_the_whole_batchs_diagnostics():
    from mathrl.engine.distributed import Dist
    from mathrl.engine.metrics import StepMetrics

    gen = torch.Generator().manual_seed(1)
    t, s, m = -torch.rand(6, 4, generator=gen), -torch.rand(6, 4, generator=gen), torch.ones(6, 4)
    metrics = StepMetrics()
    for rows in (slice(0, 2), slice(2, 6)):
        metrics.summed(mismatch_sums(t[rows], s[rows], m[rows]), mismatch_metrics)
    row = metrics.reduce(Dist())
    whole = mismatch_metrics(mismatch_sums(t, s, m))
    assert {k: row[k] for k in whole} == pytest.approx(whole)
    assert math.isnan(row["mismatch_logp_diff_max"]) and math.isnan(row["mismatch_corrected_frac"])  # not recorded


# ---------------------------------------------------------------- corrections by hand
W = torch.tensor([[0.25, 0.8, 1.5, 3.0]], dtype=torch.float64)


def test_truncated_importance_sampling_caps_the_weight():
    assert truncated_weights(W, 2.0).tolist() == [[0.25, 0.8, 1.5, 2.0]]


def test_masked_importance_sampling_drops_tokens_outside_the_band():
    assert token_mask_weights(W, 2.0).tolist() == [[0.0, 1.0, 1.0, 0.0]]  # band [0.5, 2]


def test_sequence_masking_reads_the_geometric_mean_of_the_masked_tokens():
    ln4 = math.log(4.0)
    trainer = torch.tensor([[ln4, ln4, 0.0], [ln4, -ln4, 0.0], [0.5, 0.0, 9.0]])  # sampler 0: d = trainer
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # row 3's d of 9 is masked out
    keep = sequence_mask_weights(trainer, torch.zeros(3, 3), mask, 2.0)
    # geometric means 4 (outside [0.5, 2]), 1, exp(0.5) = 1.65 (inside)
    assert keep.tolist() == [[0.0] * 3, [1.0] * 3, [1.0] * 3]


def test_corrections_multiply_are_detached_and_are_none_when_off():
    sampler = torch.zeros(1, 4)
    trainer = W.log().float().requires_grad_(True)
    mask = torch.ones(1, 4)
    assert correction(trainer, sampler, mask) == (None, None)
    both, changed = correction(trainer, sampler, mask, tis_cap=1.0, mis_cap=2.0)
    torch.testing.assert_close(both, torch.tensor([[0.0, 0.8, 1.0, 0.0]]))
    assert not both.requires_grad and both.dtype == torch.float32
    assert changed.tolist() == [[1.0, 0.0, 1.0, 1.0]]  # w 0.25 and 3 dropped, 1.5 capped at 1; 0.8 untouched
    masked, changed = correction(trainer, sampler, mask, mis_cap=2.0)
    assert masked.tolist() == [[0.0, 1.0, 1.0, 0.0]] and changed.tolist() == [[1.0, 0.0, 0.0, 1.0]]  # kept: weight 1
    seq, changed = correction(trainer, sampler, mask, seq_mask_cap=2.0)  # geometric mean 0.84: kept
    assert seq.tolist() == [[1.0] * 4] and changed.sum() == 0
    torch.testing.assert_close(importance_weights(trainer, sampler), W)


# ---------------------------------------------------------------- truncated sampling
def test_top_k_and_top_p_keep_the_hand_picked_tokens():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    assert torch.isinf(truncate_logits(logits, top_k=2)).tolist() == [[True, False, False, True]]
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    # sorted 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps 0.5 and the token that crosses 0.7 (0.3)
    assert torch.isinf(truncate_logits(probs.log(), top_p=0.7)).tolist() == [[True, False, True, False]]
    assert torch.isinf(truncate_logits(probs.log(), top_p=0.5)).tolist() == [[True, False, True, True]]
    assert truncate_logits(logits) is logits  # no limit: untouched


def test_the_sampler_records_the_log_prob_of_the_truncated_distribution():
    probs = torch.tensor([[[0.15, 0.5, 0.05, 0.3]]])
    logp = sampler_logprobs(probs.log(), torch.tensor([[3]]), top_p=0.7)
    assert float(logp) == pytest.approx(math.log(0.3 / 0.8))


def tiny_gpt(seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=14, block_size=12, n_layer=1, n_head=2, n_embd=16)).eval()


def test_top_k_one_samples_the_greedy_answer():
    model, prompts = tiny_gpt(), torch.randint(0, 10, (5, 4), generator=torch.Generator().manual_seed(1))
    noise = torch.rand(5, 3, 14, generator=torch.Generator().manual_seed(2))
    assert torch.equal(model.generate(prompts, 3, noise=noise, top_k=1), model.generate(prompts, 3, greedy=True))


# ---------------------------------------------------------------- the sampler's weights
def test_a_stale_sampler_has_the_weights_of_k_updates_ago_in_its_dtype():
    policy = tiny_gpt()
    sampler = RolloutSampler(policy, "bfloat16", staleness=2)
    seen = []
    for step in range(4):
        with torch.no_grad():
            policy.lm_head.weight.fill_(float(step))  # the weights after `step` updates
        model = sampler.policy_for_step(policy)
        assert model is not policy and model.lm_head.weight.dtype == torch.bfloat16
        seen.append(float(model.lm_head.weight[0, 0]))
    assert seen == [0.0, 0.0, 0.0, 1.0]  # steps 1 and 2 use step 1's weights, then 2 updates behind
    assert RolloutSampler(policy).policy_for_step(policy) is policy  # the control: the trainer's own policy


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_reduced_precision_linear_is_torch_s_own_up_to_the_order_of_its_sum(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(256, 64, generator=g).to(dtype)
    weight, bias = (torch.randn(96, 64, generator=g) / 8).to(dtype), torch.randn(96, generator=g).to(dtype)
    for args, kwargs in [((x, weight, bias), {}), ((x, weight), {"bias": bias}), ((x, weight), {})]:
        own = torch.nn.functional.linear(*args, **kwargs)
        with ReducedLinearInFloat32():
            ours = torch.nn.functional.linear(*args, **kwargs)
        assert ours.dtype == dtype
        # the same products, summed in float32 in another order: equal but for rare last-place differences
        ulp = torch.finfo(dtype).eps * own.float().abs().clamp_min(torch.finfo(dtype).smallest_normal)  # subnormals too
        assert ((ours.float() - own.float()).abs() <= 2 * ulp).all()
        assert (ours == own).float().mean() > 0.99


def test_float32_linear_and_a_float32_sampler_are_left_alone():
    x, weight = torch.randn(4, 3), torch.randn(2, 3)
    with ReducedLinearInFloat32():
        assert torch.equal(torch.nn.functional.linear(x, weight), torch.nn.functional.linear(x, weight))
    policy = tiny_gpt()
    assert isinstance(RolloutSampler(policy).kernels("cpu"), contextlib.nullcontext)
    assert isinstance(RolloutSampler(policy, staleness=1).kernels("cpu"), contextlib.nullcontext)
    assert isinstance(RolloutSampler(policy, "bfloat16").kernels("cpu"), ReducedLinearInFloat32)
    assert isinstance(RolloutSampler(policy, "bfloat16").kernels("cuda"), contextlib.nullcontext)


def test_the_bf16_sampler_s_distribution_under_the_float32_products_is_its_own():
    policy = tiny_gpt()
    model = RolloutSampler(policy, "bfloat16").policy_for_step(policy)
    idx = torch.randint(0, 10, (8, 6), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        own = torch.softmax(model(idx).float(), -1)
        with ReducedLinearInFloat32():
            ours = torch.softmax(model(idx).float(), -1)
    assert (ours - own).abs().max() < 1e-2  # a few bf16 last places, through two layers


# ---------------------------------------------------------------- the control against each source, on real runs
def train(env, run_id, *settings):
    return main(["train", "--config", str(env["config"]), "--run-id", run_id, "steps=2", "eval_every=2", *settings])


def metrics(env, run_id) -> pd.DataFrame:
    return pd.read_csv(env["results"] / "runs" / run_id / "metrics.csv")


SOURCES = {"bf16": ["sampler_dtype=bfloat16"], "fp16": ["sampler_dtype=float16"],
           "stale": ["rollout_staleness=1", "lr=3e-3"],
           "top_p": ["sample_top_p=0.9"], "top_k": ["sample_top_k=3"]}  # fmt: skip


def test_the_fp32_control_differs_by_rounding_and_each_source_by_ten_times_more(run_env):
    assert train(run_env, "control") == 0
    control = metrics(run_env, "control")
    largest = float(control["mismatch_logp_diff_max"].max())
    assert 0 <= largest < 1e-4
    assert control["mismatch_ess"].min() > 1 - 1e-6 and control["mismatch_corrected_frac"].isna().all()
    for name, settings in SOURCES.items():
        assert train(run_env, name, *settings) == 0
        m = metrics(run_env, name)
        assert float(m["mismatch_logp_diff_max"].max()) >= 10 * max(largest, 1e-7), name
    stale = metrics(run_env, "stale")
    assert stale["mismatch_logp_diff_max"].iloc[0] < 1e-4  # step 1 samples with step 1's weights


def test_a_correction_engages_only_where_weights_leave_its_band(run_env):
    # (a cap of exactly 1 would also cap the rounding of the control: w = 1 + 1e-6 is above it)
    assert train(run_env, "tis", "rollout_staleness=1", "lr=3e-3", "tis_cap=1.1", "mis_cap=3.0") == 0
    m = metrics(run_env, "tis")
    assert m["mismatch_corrected_frac"].iloc[0] == 0  # step 1: no mismatch, nothing to correct
    assert m["mismatch_corrected_frac"].iloc[1] > 0  # step 2 samples with step 1's weights
