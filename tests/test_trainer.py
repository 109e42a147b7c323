"""The RL trainer through its real entry point (`mathrl train`), on the tiny warmed-up task."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from mathrl.engine import snapshot
from mathrl.engine.trainer import EXTRAS, METRICS
from mathrl.pipeline.cli import main

VOLATILE = ["seconds", "sample_seconds", "update_seconds", "eval_seconds"]  # wall-clock columns


def train(env, run_id, *settings, extra=()):
    argv = ["train", "--config", str(env["config"]), "--run-id", run_id, *extra, *settings]
    return main(argv)


def metrics(env, run_id) -> pd.DataFrame:
    return pd.read_csv(env["results"] / "runs" / run_id / "metrics.csv")


def summary(env, run_id) -> dict:
    return json.loads((env["results"] / "runs" / run_id / "summary.json").read_text())


def weights(env, run_id) -> dict:
    return snapshot.load(env["results"] / "runs" / run_id / "snapshot.pt")["net"]


def adam_envelope(steps: int, lr: float, beta1: float = 0.9, beta2: float = 0.99) -> float:
    """The most a weight can move in `steps` Adam updates, whatever its gradients: at step t the bias-corrected
    |m̂/√v̂| is at most (1 − β1)/√(1 − β2) · √(Σ_j<t (β1²/β2)^j) · √(1 − β2^t)/(1 − β1^t) (Cauchy-Schwarz on the two
    moving averages), each update is lr times that."""
    total = 0.0
    for t in range(1, steps + 1):
        ratio = (1 - beta1) / math.sqrt(1 - beta2) * math.sqrt(sum((beta1**2 / beta2) ** j for j in range(t)))
        total += lr * ratio * math.sqrt(1 - beta2**t) / (1 - beta1**t)
    return total


def test_adams_envelope_bounds_how_far_a_weight_moves():
    """However its gradients come (signs and sizes drawn at random, or one sign throughout), three AdamW steps move a
    weight no further than the envelope, and the worst case comes near it."""
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(10_000, generator=gen) * torch.rand(10_000, generator=gen) ** 4 for _ in range(3)]
    grads.append(torch.ones(10_000))
    for g in (torch.stack(grads[:3]), torch.stack([grads[3]] * 3)):
        w = torch.zeros(10_000, requires_grad=True)
        opt = torch.optim.AdamW([w], lr=1e-3, betas=(0.9, 0.99), eps=1e-12, weight_decay=0.0)
        for step in g:
            w.grad = step.clone()
            opt.step()
        assert w.detach().abs().max() <= adam_envelope(3, 1e-3) * (1 + 1e-5)
    assert w.detach().abs().max() >= 0.99 * adam_envelope(3, 1e-3)  # one sign throughout: the bound is met


def assert_same_weights(wa: dict, wb: dict, key_bias_atol: float = 1e-5) -> None:
    """Equal up to float summation order: after a few Adam steps a few 1e-6 (2.8e-6 on an AVX2-only machine's
    kernels), far below one lr-sized step. The attention key biases are the exception: their true gradient is
    exactly zero (softmax ignores a per-query constant), so what Adam steps them by is float noise, whose sign
    depends on the kernels' summation order: two runs may move them apart by up to twice Adam's envelope over the
    steps under Adam (the function does not depend on them; the metrics compared beside this check that). Under SGD
    a step is linear in the gradient and the noise stays at float size."""
    assert wa.keys() == wb.keys()
    for name in wa:
        atol = key_bias_atol if name.endswith("attn.c_attn.bias") else 1e-5
        torch.testing.assert_close(wa[name], wb[name], rtol=0, atol=atol, msg=name)


@pytest.mark.parametrize("algorithm", ["reinforce", "ppo", "grpo", "rloo", "dapo"])
def test_each_algorithm_runs_and_writes_the_contract(run_env, algorithm):
    assert train(run_env, algorithm, f"algorithm={algorithm}", "steps=3", "eval_sampled=true") == 0
    df = metrics(run_env, algorithm)
    assert list(df.columns) == METRICS + EXTRAS and list(df["step"]) == [1, 2, 3]
    for col in ["reward_mean", "accuracy", "entropy", "kl", "grad_norm", "policy_loss", "lr", "frac_zero_std"]:
        assert df[col].notna().all() and (df[col].abs() < 1e6).all(), col
    assert df["eval_accuracy"].notna().sum() == 2  # steps 2 and 3 (eval_every 2, and the last)
    assert list(df["eval_sampled_accuracy"].notna()) == [False, False, True]  # sampled answers: at the last step only
    assert df["value_loss"].notna().all() == (algorithm == "ppo")
    assert df["baseline"].notna().all() == (algorithm == "reinforce")
    assert (df["samples"] >= 16 * df["step"]).all()
    s = summary(run_env, algorithm)
    for key in [
        "run_id",
        "experiment",
        "task",
        "algorithm",
        "batch_size",
        "lr",
        "kl_coef",
        "seed",
        "config",
        "final",
        "best",
        "wall_seconds",
        "versions",
        "alerts",
    ]:
        assert key in s, key
    assert s["algorithm"] == algorithm and s["status"] == "complete" and s["config"]["batch_size"] == 16
    assert s["versions"]["cpu"] and s["versions"]["cpu_kernels"]  # the float path the run was trained on
    assert (
        0 <= s["initial"]["eval_sampled_accuracy"] <= 1 and s["resolved"]["n_eval"] == 50
    )  # before RL too; tiny eval_size


def test_same_seed_same_metrics_on_cpu(run_env):
    assert train(run_env, "a", "seed=3") == 0
    assert train(run_env, "b", "seed=3") == 0
    assert train(run_env, "c", "seed=4") == 0
    a, b, c = (metrics(run_env, r).drop(columns=VOLATILE) for r in "abc")
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_gradient_accumulation_equals_the_large_batch(run_env):
    # SGD: its step is linear in the gradient, so float summation noise stays at float size. Adam
    # divides by the gradient's own scale, turning the noise of a near-zero gradient (the attention
    # keys') into lr-sized steps whose size depends on the CPU's kernels, not on accumulation.
    sgd = ("optimizer=sgd", "lr=0.05")
    assert train(run_env, "full", "steps=2", "loss_agg=token", *sgd) == 0
    assert train(run_env, "micro", "steps=2", "loss_agg=token", "micro_batch_size=4", *sgd) == 0
    assert train(run_env, "full_seq", "steps=2", "micro_batch_size=8", "algorithm=ppo", *sgd) == 0
    assert train(run_env, "micro_seq", "steps=2", "micro_batch_size=4", "algorithm=ppo", *sgd) == 0
    for big, small in [("full", "micro"), ("full_seq", "micro_seq")]:
        assert_same_weights(weights(run_env, big), weights(run_env, small))
        ma, mb = metrics(run_env, big), metrics(run_env, small)
        for col in ["grad_norm", "policy_loss", "entropy", "kl"]:
            assert ma[col].tolist() == pytest.approx(mb[col].tolist(), rel=1e-4, abs=1e-6), col


def test_resumed_run_equals_uninterrupted(run_env):
    assert train(run_env, "whole", "steps=4") == 0
    assert train(run_env, "split", "steps=2") == 0
    assert train(run_env, "split", "steps=4") == 0  # the same command, extended: resumes at step 2
    a, b = (metrics(run_env, r).drop(columns=VOLATILE) for r in ("whole", "split"))
    pd.testing.assert_frame_equal(a, b)
    assert train(run_env, "split", "steps=4") == 0  # complete: nothing to redo
    pd.testing.assert_frame_equal(metrics(run_env, "split").drop(columns=VOLATILE), a)


def test_snapshot_of_other_settings_or_shape_is_refused(run_env, capsys):
    assert train(run_env, "r", "steps=2") == 0
    assert train(run_env, "r", "steps=3", "lr=0.01") == 2
    err = capsys.readouterr().err
    assert "lr" in err and "snapshot" in err
    path = run_env["results"] / "runs" / "r" / "snapshot.pt"
    st = snapshot.load(path)
    st["model_config"] = {**st["model_config"], "n_embd": 64}
    snapshot.save(path, st)
    assert train(run_env, "r", "steps=3") == 2
    assert "does not match this run's model" in capsys.readouterr().err


def test_corrupt_snapshot_falls_back_to_previous(run_env, capsys):
    assert train(run_env, "r", "steps=2", "snapshot_every=1") == 0
    path = run_env["results"] / "runs" / "r" / "snapshot.pt"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated, as by a crash mid-write
    assert train(run_env, "r", "steps=3") == 0
    err = capsys.readouterr().err
    assert "snapshot.pt is unusable" in err
    assert list(metrics(run_env, "r")["step"]) == [1, 2, 3]  # resumed from step 1's snapshot (.prev)


@pytest.mark.parametrize("policy", ["skip", "stop"])
def test_nonfinite_loss_never_reaches_the_weights(run_env, policy):
    assert train(run_env, policy, "steps=4", "fault_nan_step=2", f"nan_policy={policy}") == 0
    df, s = metrics(run_env, policy), summary(run_env, policy)
    assert df.loc[df.step == 2, "skipped"].item() == 1
    assert [a["kind"] for a in s["alerts"]].count("nonfinite") == 1
    for name, w in weights(run_env, policy).items():
        assert torch.isfinite(w).all(), name
    if policy == "skip":
        assert s["status"] == "complete" and list(df["step"]) == [1, 2, 3, 4]
        assert df.loc[df.step != 2, "skipped"].eq(0).all()
    else:
        assert s["status"] == "stopped_nonfinite" and list(df["step"]) == [1, 2]


def test_batch_not_divisible_by_world_size_is_refused(run_env, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert train(run_env, "w", "batch_size=16", "group_size=4") == 2
    assert "world size" in capsys.readouterr().err
    assert not (run_env["results"] / "runs" / "w").exists()


@pytest.mark.slow
def test_two_process_ddp_equals_one_process(run_env):
    """gloo on CPU: 2 ranks x 8 rollouts give the 16-rollout run of one process."""
    base = ["--config", str(run_env["config"]), "steps=3", "batch_size=16", "group_size=4"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run(
        [sys.executable, "-m", "mathrl", "train", "--run-id", "one", *base], env=env, capture_output=True, text=True
    )
    assert one.returncode == 0, one.stderr
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "mathrl",
        "train",
        "--run-id",
        "two",
        *base,
    ]
    two = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = (metrics(run_env, r).drop(columns=VOLATILE) for r in ("one", "two"))
    # float rounding between the sampling and the training forward: its size depends on how the batch is cut into
    # kernels (16 rows in one process, 8 in each of two), so each run's is checked against the rounding level
    rounding = ["mismatch_logp_diff_mean", "mismatch_logp_diff_max"]
    pd.testing.assert_frame_equal(a.drop(columns=rounding), b.drop(columns=rounding), rtol=1e-4, atol=1e-6)
    assert (a[rounding] < 1e-4).all().all() and (b[rounding] < 1e-4).all().all()
    assert_same_weights(weights(run_env, "one"), weights(run_env, "two"), key_bias_atol=2 * adam_envelope(3, 3.0e-4))
    assert summary(run_env, "two")["resolved"]["world_size"] == 2
    assert "Step 3/3" in two.stdout and two.stdout.count("Step 3/3") == 1  # only rank 0 prints


@pytest.mark.slow
def test_experiment_run_through_launch_and_torchrun(run_env):
    """The pipeline's command: `mathrl launch` -> torchrun -> `mathrl train --run ID`
    (torchrun's own parser must not swallow `--run`)."""
    cmd = [sys.executable, "-m", "mathrl", "launch", "--gpus", "0", "--torchrun", "always", "--",
           "--config", str(run_env["config"]), "--run", "tiny__batch_size-8__s0"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "MATHRL_FAKE_GPUS": "0"})
    assert done.returncode == 0, done.stderr[-3000:]
    s = summary(run_env, "tiny__batch_size-8__s0")
    assert s["experiment"] == "tiny" and s["batch_size"] == 8 and s["status"] == "complete"


def test_changed_settings_restart_only_when_asked(run_env, capsys):
    """After a config change the pipeline passes --on-mismatch restart: the stale snapshot is
    set aside (kept) and the run starts over, saying so; by default it is an error."""
    assert train(run_env, "r", "steps=2") == 0
    assert train(run_env, "r", "steps=2", "lr=0.001") == 2
    assert train(run_env, "r", "steps=2", "lr=0.001", extra=["--on-mismatch", "restart"]) == 0
    out = capsys.readouterr().out
    assert "restarting r from step 0" in out
    assert (run_env["results"] / "runs" / "r" / "snapshot.stale.pt").exists()
    assert summary(run_env, "r")["lr"] == 0.001


def test_injected_gradient_spike_multiplies_the_gradient_at_its_step(run_env):
    """The spike hook scales the loss, so the (pre-clip) gradient norm, by its factor at that step only."""
    assert train(run_env, "clean", "steps=3", "grad_clip=null") == 0
    assert (
        train(run_env, "spiked", "steps=3", "grad_clip=null", "fault_grad_spike_step=1", "fault_grad_spike_scale=1000")
        == 0
    )
    clean, spiked = metrics(run_env, "clean"), metrics(run_env, "spiked")
    ratio = spiked.loc[spiked.step == 1, "grad_norm"].item() / clean.loc[clean.step == 1, "grad_norm"].item()
    assert ratio == pytest.approx(1000, rel=1e-3)


def test_critic_warmup_trains_only_the_value_head(run_env):
    """During critic pre-training the policy's weights stay those it started from."""
    assert train(run_env, "warm", "algorithm=ppo", "steps=2", "critic_warmup_steps=2", "snapshot_every=1") == 0
    w = weights(run_env, "warm")
    assert train(run_env, "frozen", "algorithm=ppo", "steps=2", "lr=1e-12", "snapshot_every=1") == 0
    ref = weights(run_env, "frozen")
    policy = [k for k in w if not k.startswith("value_head")]
    assert policy and all(torch.equal(w[k], ref[k]) or torch.allclose(w[k], ref[k], atol=1e-9) for k in policy)
    heads = [k for k in w if k.startswith("value_head")]
    assert heads and any(not torch.allclose(w[k], ref[k], atol=1e-6) for k in heads)


def test_per_token_rewards_and_the_value_clip_in_a_ppo_run(run_env, capsys):
    """reward_placement per_token changes the critic's targets; value_delta and value_clip_frac come from the
    epochs after the first (a clip below any move cuts every prediction, no clip none); only ppo takes it."""
    common = ("algorithm=ppo", "steps=2", "ppo_epochs=2", "critic_warmup_steps=2", "critic_warmup_lr=1e-2")
    assert train(run_env, "dense", *common, "reward_placement=per_token", "value_clip=1e-9") == 0
    assert train(run_env, "sparse", *common, "value_clip=null") == 0
    dense, sparse = metrics(run_env, "dense"), metrics(run_env, "sparse")
    # same rollouts at step 1 (values 0 before any update); the targets differ, so the value loss does
    assert (
        dense.loc[0, "reward_mean"] == sparse.loc[0, "reward_mean"]
        and dense.loc[0, "value_loss"] != sparse.loc[0, "value_loss"]
    )
    assert (dense["value_delta"] > 0).all() and (sparse["value_delta"] > 0).all()
    assert (dense["value_clip_frac"] == 1.0).all() and (sparse["value_clip_frac"] == 0.0).all()
    assert train(run_env, "one_epoch", "algorithm=ppo", "steps=1", "ppo_epochs=1") == 0
    assert metrics(run_env, "one_epoch")[["value_delta", "value_clip_frac"]].isna().all().all()
    capsys.readouterr()
    assert train(run_env, "grpo_dense", "algorithm=grpo", "steps=1", "reward_placement=per_token") == 2
    assert "reward_placement per_token: only a critic's GAE" in capsys.readouterr().err


def test_random_reward_resumes_and_sample_filters_keep_one_sign(run_env):
    """The random reward's draws come from the snapshotted generator: a resumed run equals an
    uninterrupted one. A sample filter leaves only advantages of its sign (adv_mean)."""
    assert train(run_env, "coin", "reward=random", "steps=4") == 0
    assert train(run_env, "coin_split", "reward=random", "steps=2") == 0
    assert train(run_env, "coin_split", "reward=random", "steps=4") == 0
    a, b = (metrics(run_env, r).drop(columns=VOLATILE) for r in ("coin", "coin_split"))
    pd.testing.assert_frame_equal(a, b)
    assert not a["reward_mean"].equals(a["accuracy"])
    for mode, sign in [("positive", 1), ("negative", -1)]:
        assert train(run_env, mode, f"sample_filter={mode}", "steps=2") == 0
        df = metrics(run_env, mode)
        # 0 at a step where every group's rewards were equal
        assert (sign * df["adv_mean"] >= 0).all() and (sign * df["adv_mean"] > 0).any(), mode


def test_a_skipped_update_prints_its_own_alert(run_env, capsys):
    # monitor_entropy_min above any entropy: a low-entropy alert follows the non-finite one in the same step
    assert train(run_env, "nan_alert", "steps=2", "fault_nan_step=2", "monitor_entropy_min=100") == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("alert: step 2:")]
    assert any("non-finite loss or gradient" in line for line in lines), lines
    assert len(lines) == len(set(lines)), lines


def test_a_run_says_what_it_does_first_and_how_long_the_rest_will_take(run_env, capsys):
    assert train(run_env, "chatty", "steps=3") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("chatty: 3 steps of 16 rollouts on cpu") and "held-out problems first" in out[0]
    assert out[1].startswith("Step 1/3") and out[2].startswith("chatty: about ") and "2 steps of" in out[2]


def test_eval_seconds_and_the_shared_starting_evaluation(run_env):
    """Each evaluation's seconds are in metrics.csv (NaN where a step has none) and the one
    before RL in summary.json; the second run from the same warm-up reads the starting
    evaluation stored beside the checkpoint instead of computing it, and gets the same
    greedy and sampled accuracy (the sampled noise has a fixed seed, not the run's)."""
    assert train(run_env, "first", "seed=1", "steps=3") == 0
    assert train(run_env, "second", "seed=2", "steps=3") == 0
    for run_id in ("first", "second"):
        df = metrics(run_env, run_id)
        evaluated = df["eval_accuracy"].notna()
        assert list(evaluated) == [False, True, True]
        assert (df.loc[evaluated, "eval_seconds"] > 0).all() and df.loc[~evaluated, "eval_seconds"].isna().all()
        s = summary(run_env, run_id)
        assert s["initial"]["eval_seconds"] >= 0
        assert s["run_seconds"] >= s["wall_seconds"] + s["initial"]["eval_seconds"]
    first, second = summary(run_env, "first"), summary(run_env, "second")
    assert first["initial"]["eval_accuracy"] == second["initial"]["eval_accuracy"]
    assert first["initial"]["eval_sampled_accuracy"] == second["initial"]["eval_sampled_accuracy"]
    (entry,) = (run_env["results"] / "sft" / "add" / "w0" / "evaluations").glob("*.json")
    assert json.loads(entry.read_text())["problems"] == 50  # the runs' eval_size
    heldout = [(run_env["results"] / "runs" / r / "heldout.csv").read_text().splitlines() for r in ("first", "second")]
    assert [line.split(",")[2] for line in heldout[0]] == [line.split(",")[2] for line in heldout[1]]  # initial column


def test_pass_at_k_before_rl_is_shared_by_a_seed_and_equal_to_sampling_it(run_env):
    """Two arms of one seed from one warm-up read the same pass@k counts before RL: the second
    reads the first's entry beside the checkpoint, and it equals what sampling gives (the run's
    seed draws the noise); another seed samples its own."""
    k = ("pass_at_k=true", "pass_at_k_problems=6", "pass_at_k_samples=4", "steps=1")
    assert train(run_env, "arm_a", "seed=3", *k) == 0
    assert train(run_env, "arm_b", "seed=3", "lr=1e-5", *k) == 0
    assert train(run_env, "arm_c", "seed=4", *k) == 0
    entries = sorted((run_env["results"] / "sft" / "add" / "w0" / "evaluations").glob("*passk-*.json"))
    assert len(entries) == 2  # one per seed

    def initial(run_id):
        lines = (run_env["results"] / "runs" / run_id / "pass_at_k.csv").read_text().splitlines()[1:]
        return [line.split(",")[-1] for line in lines if line.startswith("initial,")]

    assert initial("arm_a") == initial("arm_b") and len(initial("arm_a")) == 6
    for e in entries:
        e.unlink()
    assert train(run_env, "arm_d", "seed=3", *k) == 0  # nothing stored: sampled again, the same counts
    assert initial("arm_d") == initial("arm_a")
    assert summary(run_env, "arm_b")["pass_at_k_seconds"] >= 0


def test_sampled_evaluation_only_when_asked(run_env):
    """Without eval_sampled the last evaluation is greedy alone: no sampled accuracy at any step."""
    assert train(run_env, "greedy_only", "steps=2") == 0
    df = metrics(run_env, "greedy_only")
    assert df["eval_accuracy"].notna().iloc[-1] and df["eval_sampled_accuracy"].isna().all()
    assert 0 <= summary(run_env, "greedy_only")["initial"]["eval_sampled_accuracy"] <= 1  # before RL: always
