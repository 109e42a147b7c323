"""The CUDA path, on a machine with a GPU (skipped without one, so the CPU suite is unchanged):
a CUDA run against the same run on the CPU (within float tolerance: kernels differ, so not
bit-identical), the KV-cache sampler on the GPU, a bf16 sampler where bf16 is native, and two
runs sharing one GPU through the pipeline's GPU slots (`mathrl launch --runs-per-gpu`)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import VOLATILE, child_env, run_dir, train_cmd

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# Columns that legitimately differ between devices beyond float tolerance: timing, memory, and the
# sampler/trainer rounding gap, whose size is set by the kernels (each is checked on its own below).
DEVICE_DEPENDENT = [*VOLATILE, "mismatch_logp_diff_mean", "mismatch_logp_diff_max"]


def train(env: dict, run_id: str, *settings: str) -> subprocess.CompletedProcess:
    cmd = train_cmd(env, run_id, *settings)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=child_env())


def read_run(env: dict, run_id: str) -> tuple[pd.DataFrame, dict]:
    directory = run_dir(env, run_id)
    return pd.read_csv(directory / "metrics.csv"), json.loads((directory / "summary.json").read_text())


@pytest.mark.parametrize("extra", [(), ("dynamic_sampling=true",)], ids=["grpo", "dynamic_sampling"])
def test_a_cuda_run_matches_the_same_run_on_the_cpu(run_env, extra):
    """Dynamic sampling too: its refill picks the informative groups' rows by indices built beside the rewards."""
    for run_id, device in (("on_cpu", "cpu"), ("on_cuda", "cuda")):
        done = train(run_env, run_id, f"device={device}", "steps=4", *extra)
        assert done.returncode == 0, done.stderr[-3000:]
    cpu, cpu_summary = read_run(run_env, "on_cpu")
    gpu, gpu_summary = read_run(run_env, "on_cuda")
    assert cpu_summary["resolved"]["device"] == "cpu" and gpu_summary["resolved"]["device"].startswith("cuda")
    shared = [c for c in cpu.columns if c not in DEVICE_DEPENDENT and pd.api.types.is_numeric_dtype(cpu[c])]
    assert len(shared) > 20
    # The sampling noise is drawn on the CPU for both, so the same tokens are sampled and the
    # rewards are equal; losses, entropies and gradient norms agree to float32 rounding.
    pd.testing.assert_frame_equal(cpu[shared], gpu[shared], rtol=1e-3, atol=1e-4)
    for frame in (cpu, gpu):
        assert (frame[["mismatch_logp_diff_mean", "mismatch_logp_diff_max"]] < 1e-3).all().all()


def test_kv_cache_sampling_on_cuda_matches_full_recomputation():
    from mathrl.engine.model import GPT, gpt_config

    torch.manual_seed(0)
    model = GPT(gpt_config("small", 16, 24)).cuda().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(10)  # sharp logits: sampling far from uniform
    idx = torch.randint(0, 16, (64, 8), device="cuda")
    noise = torch.rand(64, 6, 16, generator=torch.Generator().manual_seed(1)).cuda()
    out, logits = model.generate(idx, 6, noise=noise, return_logits=True)
    ref, ref_logits = model.generate_naive(idx, 6, noise=noise, return_logits=True)
    assert torch.equal(out, ref)
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=0)


def test_a_bf16_sampler_on_cuda_records_its_mismatch_against_the_fp32_trainer(run_env):
    done = train(run_env, "bf16", "device=cuda", "steps=2", "sampler_dtype=bfloat16")
    assert done.returncode == 0, done.stderr[-3000:]
    frame, _ = read_run(run_env, "bf16")
    gap = frame["mismatch_logp_diff_mean"]
    assert np.isfinite(gap).all() and (gap > 1e-4).all()  # bf16 rounding, well above fp32's
    assert np.isfinite(frame["policy_loss"]).all()


def test_two_runs_share_one_gpu_through_its_slots(run_env, tmp_path):
    """Both launches start at once with two slots a GPU: the second finds slot 0 held and takes
    slot 1 (its lock file exists only if it had to), and both train on the GPU."""
    locks = tmp_path / "locks"
    launch = [sys.executable, "-m", "mathrl", "launch", "--gpus", "1", "--runs-per-gpu", "2", "--lock-dir", str(locks)]
    config = str(run_env["config"])
    train = ["--", "--config", config, "steps=3", "device=cuda"]
    cmds = [[*launch, *train, "--run-id", run_id] for run_id in ("one", "two")]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env())
             for cmd in cmds]  # fmt: skip
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[-2000:] for o in outputs]
    assert (locks / "gpu0.lock").exists() and (locks / "gpu0-1.lock").exists()
    for run_id in ("one", "two"):
        _, summary = read_run(run_env, run_id)
        assert summary["status"] == "complete" and summary["resolved"]["device"].startswith("cuda")
