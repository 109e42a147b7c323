"""The gradient-variance probe's tables from hand-made probe files: every number derived by hand."""

from __future__ import annotations

import math

from mathrl.analysis.measures import gradient_noise as gn

G = {"tasks": ["add", "mul"], "batch_sizes": [64, 512], "accumulation": [512, 128]}
DOC = {64: 4.0, 128: 2.0, 512: 0.5}
ACC = {"batch_size": 512, "micro_batch_size": 128, "steps": 4, "max_abs_difference": 1e-8, "max_abs_gradient": 0.1,
       "relative": 1e-7}  # fmt: skip


def test_variance_against_batch_size_beside_one_over_n():
    probe = {"variance": [{"batch_size": 512, "variance": 1e-4}, {"batch_size": 64, "variance": 8e-4}]}
    out = gn.gradvar_tables({"add": {**probe, "accumulation": ACC}, "mul": None}, G, DOC)
    gv = out["stability_gradvar"]
    assert list(gv.columns) == gn.CLAIM_TABLES["stability_gradvar"]
    add = gv[gv["task"] == "add"].set_index("batch_size")
    assert list(add.index) == [64, 512] and add.loc[64, "ratio_to_largest"] == 8.0 and add.loc[64, "theory_ratio"] == 8
    assert (add.loc[64, "doc_variance"], add.loc[64, "doc_ratio"], add.loc[512, "ratio_to_largest"]) == (4.0, 8.0, 1.0)
    mul = gv[gv["task"] == "mul"]  # the probe is missing: the config's batch sizes, no variance
    assert list(mul["batch_size"]) == [64, 512] and set(mul["status"]) == {"missing"} and mul["variance"].isna().all()
    acc = out["stability_accumulation"].set_index("task")
    assert list(acc.reset_index().columns) == gn.CLAIM_TABLES["stability_accumulation"]
    assert acc.loc["add", "relative"] == 1e-7 and acc.loc["add", "status"] == "complete"
    assert (acc.loc["mul", "batch_size"], acc.loc["mul", "micro_batch_size"]) == (512, 128)
    assert math.isnan(acc.loc["mul", "steps"])
