"""The update diagnostics, each on a case computed by hand: clip sides, ppo_kl, the moments
behind the advantage statistics and the log-prob/advantage covariance, Clip-Cov and KL-Cov,
the advantage-scaling estimators, the two trend alerts of the monitor, the git state, and the
analyses of `mathrl.analysis.estimators` (pass@k, carries, the entropy law, the noise scale)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from mathrl import git_state
from mathrl.engine import algorithms as A
from mathrl.engine import losses as L
from mathrl.engine.monitor import StabilityMonitor


def close(a, b, tol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), atol=tol, rtol=0
    )


# ------------------------------------------------------------------ clip sides and ppo_kl
def test_clip_sides_split_clipped_tokens_by_the_bound_that_binds():
    # ratios 0.5 (A<0: at the low bound), 1.5 (A>0: high), 1.5 (A<0: not clipped), 0.9 (inside)
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[0.5, 1.5, 1.5, 0.9]]))
    adv = torch.tensor([[-1.0, 1.0, -1.0, 1.0]])
    _, clipped = L.clipped_surrogate(logp, old, adv, 0.2, 0.28)
    low, high = L.clip_sides(logp, old, clipped)
    assert clipped.tolist() == [[True, True, False, False]]
    assert low.tolist() == [[True, False, False, False]] and high.tolist() == [[False, True, False, False]]
    assert ((low | high) == clipped).all()


def test_ppo_kl_is_old_minus_new_logp():
    old = torch.log(torch.tensor([[0.5, 0.25]]))
    new = torch.log(torch.tensor([[0.25, 0.25]]))
    close(L.ppo_kl(new, old), [[math.log(2), 0.0]])  # the old policy's token lost half its probability


# ------------------------------------------------------------------ moments and covariance
def test_moments_give_means_stds_and_covariance_over_masked_tokens():
    x = torch.tensor([[1.0, 2.0], [3.0, 99.0]])
    y = torch.tensor([[2.0, 4.0], [0.0, -99.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    sums = L.moment_sums(x, y, mask)
    close(sums, [3, 6, 6, 10, 14, 20])
    m = L.moments(sums)
    # x: 1, 2, 3 (mean 2, var 2/3); y: 2, 4, 0 (mean 2, var 8/3); E[xy] = 10/3 -> cov = 10/3 - 4 = -2/3
    assert m["mean_x"] == pytest.approx(2) and m["mean_y"] == pytest.approx(2)
    assert m["std_x"] == pytest.approx(math.sqrt(2 / 3)) and m["std_y"] == pytest.approx(math.sqrt(8 / 3))
    assert m["cov"] == pytest.approx(-2 / 3)
    # micro-batches add up: the sums of two halves equal the sums of the whole
    close(L.moment_sums(x[:1], y[:1], mask[:1]) + L.moment_sums(x[1:], y[1:], mask[1:]), sums)
    assert math.isnan(L.moments(L.moment_sums(x, y, torch.zeros_like(mask)))["cov"])


def test_centred_product_is_the_per_token_term_of_the_covariance():
    logp = torch.tensor([[-1.0, -2.0], [-3.0, -50.0]])
    adv = torch.tensor([[2.0, 4.0], [0.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    c = L.centred_product(logp, adv, mask)
    # logp mean -2, adv mean 2: (1)(0), (0)(2), (-1)(-2), masked 0
    close(c, [[0.0, 0.0], [2.0, 0.0]])
    assert float(L.masked_mean(c, mask)) == pytest.approx(L.moments(L.moment_sums(logp, adv, mask))["cov"])


# ------------------------------------------------------------------ Clip-Cov and KL-Cov
def test_kl_cov_picks_the_tokens_of_largest_covariance_term():
    cov = torch.tensor([[0.5, 3.0], [2.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # 9.0 is masked out
    assert L.kl_cov_tokens(cov, mask, 0.5).tolist() == [[False, True], [False, False]]  # int(0.5 * 3) = 1
    assert L.kl_cov_tokens(cov, mask, 0.7).tolist() == [[False, True], [True, False]]  # int(2.1) = 2
    assert L.kl_cov_tokens(cov, mask, 1e-6).sum() == 1  # at least one token


def test_clip_cov_picks_within_the_bounds_and_not_the_already_clipped():
    cov = torch.tensor([[0.5, 3.0, 2.0, 6.0]])
    mask = torch.ones(1, 4)
    gen = torch.Generator().manual_seed(0)
    # eligible: 3.0 and 2.0 (inside (1, 5)); ratio 1.0 -> 4 wanted, only 2 eligible
    assert L.clip_cov_tokens(cov, mask, 1.0, 1.0, 5.0, gen).tolist() == [[False, True, True, False]]
    exclude = torch.tensor([[False, True, False, False]])
    assert L.clip_cov_tokens(cov, mask, 1.0, 1.0, 5.0, gen, exclude=exclude).tolist() == [[False, False, True, False]]
    one = L.clip_cov_tokens(cov, mask, 0.25, 1.0, 5.0, gen)  # int(0.25 * 4) = 1 of the two
    assert int(one.sum()) == 1 and bool(one[0, 1] | one[0, 2])


def test_covariance_remedies_on_the_surrogate():
    pg = torch.tensor([[1.0, 2.0]], requires_grad=True)
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -0.5]])
    chosen = torch.tensor([[True, False]])
    close(L.covariance_penalised(pg, logp, old, chosen, "clip_cov").detach(), [[0.0, 2.0]])
    out = L.covariance_penalised(pg, logp, old, chosen, "kl_cov", kl_coef=2.0)
    close(out.detach(), [[1.0 + 2.0 * 0.5, 2.0]])
    out.sum().backward()
    close(logp.grad, [[2.0, 0.0]])  # d/dlogp of 2|logp - old| with logp > old, only on the chosen token
    with pytest.raises(ValueError, match="allowed: clip_cov, kl_cov"):
        L.covariance_penalised(pg, logp, old, chosen, "entropy")


# ------------------------------------------------------------------ advantage scaling
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])


def test_batch_std_scales_group_centred_rewards_by_the_batch_std():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])  # groups of 2: (1, 0) and (1, 1)
    adv, _ = A.ESTIMATORS["grpo_batch_std"].fn(A.AdvantageInputs(r, MASK, group_size=2))
    std = math.sqrt(0.75 - 0.75**2)  # batch mean 0.75, population std sqrt(3)/4
    close(adv, [[0.5 / std, 0.5 / std], [-0.5 / std, 0.0], [0.0, 0.0], [0.0, 0.0]], tol=1e-5)
    grpo, _ = A.ESTIMATORS["grpo"].fn(A.AdvantageInputs(r, MASK, group_size=2))
    close(grpo[0, 0], 1.0, tol=1e-5)  # the group's std is 0.5: twice the weight of batch scaling's 0.5/0.433


def test_reinforce_pp_baseline_whitens_group_centred_rewards_over_tokens():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    adv, _ = A.ESTIMATORS["reinforce_pp_baseline"].fn(A.AdvantageInputs(r, MASK, group_size=2))
    # tokens (7 under the mask): 0.5, 0.5, -0.5, 0, 0, 0, 0 -> mean 1/14, population std
    vals = torch.tensor([0.5, 0.5, -0.5, 0, 0, 0, 0], dtype=torch.float64)
    mean, std = vals.mean(), vals.std(unbiased=False)
    want = [
        [(0.5 - mean) / std, (0.5 - mean) / std],
        [(-0.5 - mean) / std, 0.0],
        [-mean / std, -mean / std],
        [-mean / std, -mean / std],
    ]
    close(adv, want, tol=1e-5)


def test_batch_statistics_come_from_the_injected_global_mean_std():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    adv, _ = A.ESTIMATORS["grpo_batch_std"].fn(
        A.AdvantageInputs(r, MASK, group_size=2, mean_std=lambda x, w: (0.0, 2.0))
    )
    close(adv[0, 0], 0.25, tol=1e-5)  # 0.5 / 2 (as if the other ranks' rewards made the std 2)


# ------------------------------------------------------------------ monitor trend alerts
def test_grad_norm_spike_fires_against_the_median_of_the_window_once():
    m = StabilityMonitor(window=3)
    out = [
        m.check_trends(s, g, 1.0, grad_spike=5.0, entropy_rise=None)
        for s, g in enumerate([1.0, 2.0, 100.0, 1.0, 3.0, 20.0, 30.0], 1)
    ]
    # step 3 has a 2-value history: not checked; step 4: median(1, 2, 100) = 2 -> 1 is fine
    # step 5: median(2, 100, 1) = 2, 3 < 10; step 6: median(100, 1, 3) = 3, 20 > 15 fires; step 7 still above: quiet
    assert [len(a) for a in out] == [0, 0, 0, 0, 0, 1, 0]
    a = out[5][0]
    assert a["kind"] == "grad_norm_spike" and a["value"] == 20.0 and a["threshold"] == 15.0
    assert m.check_trends(8, float("inf"), 1.0, entropy_rise=None) == []  # non-finite: the "nonfinite" alert's case


def test_entropy_rise_fires_against_the_window_minimum():
    m = StabilityMonitor(window=2)
    out = [
        m.check_trends(s, 1.0, h, grad_spike=None, entropy_rise=0.5)
        for s, h in enumerate([0.4, 0.2, 0.29, 0.31, 0.2], 1)
    ]
    # step 3: min(0.4, 0.2) = 0.2, 0.29 < 0.3; step 4: min(0.2, 0.29) = 0.2, 0.31 > 0.3 fires
    assert [len(a) for a in out] == [0, 0, 0, 1, 0]
    assert out[3][0]["kind"] == "entropy_rise" and out[3][0]["threshold"] == pytest.approx(0.3)


def test_trend_histories_survive_a_snapshot():
    m = StabilityMonitor(window=2)
    for s, g in enumerate([1.0, 1.0], 1):
        m.check_trends(s, g, 0.3)
    restored = StabilityMonitor(window=2)
    restored.load_state_dict(m.state_dict())
    assert [a["kind"] for a in restored.check_trends(3, 6.0, 0.3)] == ["grad_norm_spike"]


# ------------------------------------------------------------------ provenance
def test_git_state_of_a_checkout_and_of_a_plain_directory(tmp_path):
    import subprocess

    assert git_state(tmp_path) == {"commit": None, "clean": None}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "f").write_text("a")
    env = ["-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", *env, "-C", str(tmp_path), "add", "f"], check=True)
    subprocess.run(["git", *env, "-C", str(tmp_path), "commit", "-qm", "x"], check=True)
    state = git_state(tmp_path)
    assert len(state["commit"]) == 40 and state["clean"] is True
    (tmp_path / "f").write_text("b")
    assert git_state(tmp_path)["clean"] is False


# ------------------------------------------------------------------ the trainer collects them
def test_trainer_logs_the_update_diagnostics(run_env):
    import json

    import pandas as pd

    from mathrl.pipeline.cli import main

    def run(run_id, *settings):
        assert main(["train", "--config", str(run_env["config"]), "--run-id", run_id, "steps=3", *settings]) == 0
        d = run_env["results"] / "runs" / run_id
        return pd.read_csv(d / "metrics.csv"), json.loads((d / "summary.json").read_text())

    one, summary = run("one_epoch")
    assert (one["clip_frac_low"] == 0).all() and (one["clip_frac_high"] == 0).all() and (one["ppo_kl"] == 0).all()
    assert one["cov_frac"].isna().all() and (one["adv_std"] > 0).all() and (one["adv_abs_max"] >= one["adv_std"]).all()
    assert one["logp_adv_cov"].notna().all()
    assert "commit" in summary["git"] and "clean" in summary["git"]
    two, _ = run("two_epochs", "ppo_epochs=2", "clip_eps=0.01")
    assert two["clip_frac"].tolist() == pytest.approx((two["clip_frac_low"] + two["clip_frac_high"]).tolist())
    assert (two["clip_frac"] > 0).all() and (two["ppo_kl"] != 0).all()  # the second epoch moved the ratio off 1
    # the second epoch's old log-probs are the first epoch's, gathered micro-batch by micro-batch in row order
    micro, _ = run("two_epochs_micro", "ppo_epochs=2", "clip_eps=0.01", "micro_batch_size=4")
    assert micro["ppo_kl"].tolist() == pytest.approx(two["ppo_kl"].tolist(), rel=1e-3)
    assert one[["grad_sq_micro", "grad_sq_batch", "grad_noise_scale"]].isna().all().all()  # not asked for
    noisy, _ = run("noise", "grad_noise_scale=true", "micro_batch_size=4")
    # a micro-batch of 4 is noisier than the batch of 16: E|g_b|^2 = |G|^2 + tr(Sigma)/b
    assert (noisy["grad_sq_micro"] > noisy["grad_sq_batch"]).all() and (noisy["grad_sq_batch"] > 0).all()
    from mathrl.analysis.estimators import noise_scale

    r = noisy.iloc[0]
    assert r["grad_noise_scale"] == pytest.approx(
        noise_scale(4, 16, r["grad_sq_micro"], r["grad_sq_batch"])["noise_scale"], nan_ok=True
    )
    for kind in ("clip_cov", "kl_cov"):
        df, _ = run(kind, f"policy_loss={kind}", "cov_ratio=0.1", "ppo_epochs=2", "clip_cov_lower=-1")
        assert (df["cov_frac"] > 0).all(), kind


# ------------------------------------------------------------------ analyses (mathrl.analysis.estimators)
def test_pass_at_k_is_the_unbiased_estimator():
    from mathrl.analysis.estimators import pass_at_k

    # n=4, c=1: pass@1 = 1/4; pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6; pass@4 = 1
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 4) == pytest.approx(1.0)
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10; c=0 -> 0; vectorised over problems
    assert pass_at_k([5, 5, 5], [2, 0, 5], 2).tolist() == pytest.approx([0.7, 0.0, 1.0])
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)


def test_carries_of_additions():
    from mathrl.analysis.estimators import carries

    # 0+0: none; 5+5: one; 999+1: three; 456+544: 6+4 carry, 5+4+1 carry, 4+5+1 carry -> 3; 123+456: none
    assert carries([0, 5, 999, 456, 123], [0, 5, 1, 544, 456]).tolist() == [0, 1, 3, 3, 0]


def test_entropy_law_fit_recovers_the_coefficients_and_predicts_the_second_half():
    from mathrl.analysis.estimators import fit_entropy_law

    h = np.linspace(0.6, 0.1, 40)
    r = -0.5 * np.exp(h) + 1.2  # a = 0.5, b = 1.2, ceiling 0.7
    fit = fit_entropy_law(h, r)
    assert fit["a"] == pytest.approx(0.5, abs=1e-6) and fit["b"] == pytest.approx(1.2, abs=1e-6)
    assert fit["ceiling"] == pytest.approx(0.7, abs=1e-6) and fit["r2"] == pytest.approx(1.0)
    assert fit["half_rmse"] == pytest.approx(0.0, abs=1e-6) and fit["n"] == 40
    # a reward that does not follow entropy: R^2 near 0, the second half badly predicted
    flat = fit_entropy_law(h, np.where(np.arange(40) < 20, 0.3, 0.6))
    assert flat["r2"] < 0.9 and flat["half_rmse"] == pytest.approx(0.3, abs=0.05)
    assert np.isnan(fit_entropy_law([0.1, 0.2], [0.3, 0.4])["a"])


def test_noise_scale_from_two_batch_sizes():
    from mathrl.analysis.estimators import noise_scale

    # |G|^2 = 2, tr(Sigma) = 64: E|g_B|^2 = 2 + 64/B -> 3 at B=64, 2.125 at B=512
    out = noise_scale(64, 512, 3.0, 2.125)
    assert out["grad_sq"] == pytest.approx(2.0) and out["trace_sigma"] == pytest.approx(64.0)
    assert out["noise_scale"] == pytest.approx(32.0)
    assert np.isnan(noise_scale(64, 512, 10.0, 1.0)["noise_scale"])  # |G|^2 estimated below 0: noise swamps it


def test_pass_at_k_counts_and_heldout_files(run_env):
    import pandas as pd

    from mathrl.pipeline.cli import main

    assert main(["train", "--config", str(run_env["config"]), "--run-id", "pk", "steps=2", "pass_at_k=true",
                 "pass_at_k_problems=5", "pass_at_k_samples=8"]) == 0  # fmt: skip
    d = run_env["results"] / "runs" / "pk"
    pk = pd.read_csv(d / "pass_at_k.csv")
    assert list(pk["phase"].unique()) == ["initial", "final"] and len(pk) == 10
    assert ((pk["correct"] >= 0) & (pk["correct"] <= 8) & (pk["samples"] == 8)).all()
    held = pd.read_csv(d / "heldout.csv")
    summary = json.loads((d / "summary.json").read_text())
    assert held["initial"].mean() == pytest.approx(summary["initial"]["eval_accuracy"])
    assert held["final"].mean() == pytest.approx(summary["final"]["eval_accuracy"])
