"""The gradient-variance probe and the accumulation check, through `mathrl gradvar`."""

from __future__ import annotations

import json

from mathrl.pipeline.cli import main


def test_variance_falls_with_batch_size_and_accumulation_matches(run_env):
    out = run_env["results"] / "gradvar" / "add.json"
    argv = ["gradvar", "--config", str(run_env["config"]), "--task", "add",
            "--set", "gradvar.batch_sizes=[8, 64]", "--set", "gradvar.num_samples=6",
            "--set", "gradvar.accumulation=[64, 16]", "--set", "gradvar.group_size=4"]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(out.read_text())
    var = {row["batch_size"]: row["variance"] for row in result["variance"]}
    assert var[8] > 0 and var[64] > 0
    assert var[8] / var[64] > 2.5  # theory: 8x; six samples are noisy, a 2.5x floor is not
    acc = result["accumulation"]
    assert acc["steps"] == 4 and acc["max_abs_gradient"] > 0
    assert acc["relative"] < 1e-4
    # the noise scale is computed from the same gradients' mean squared norms
    from mathrl.analysis.estimators import noise_scale

    sq = {row["batch_size"]: row["sq_norm"] for row in result["variance"]}
    assert sq[8] > sq[64] > 0  # E|g_B|^2 = |G|^2 + tr(Sigma)/B falls with B
    ns = result["noise_scale"]
    assert (ns["small"], ns["big"]) == (8, 64) and ns["trace_sigma"] == noise_scale(8, 64, sq[8], sq[64])[
        "trace_sigma"
    ] > 0
