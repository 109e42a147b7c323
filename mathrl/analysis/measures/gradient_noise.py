"""The gradient-variance probe (rl-stability-batch-and-hyperparameters.md, section 2.2): the variance of the policy
gradient against batch size, beside the 1/N the document's argument rests on, and the check that gradient
accumulation over micro-batches gives the full batch's gradient; the tables claims read of them, from the probe's
file per task (`mathrl.analysis.study_inputs.Context.gradvar`).
"""

from __future__ import annotations

import pandas as pd

from mathrl.analysis.measures.series import NAN

ACCUMULATION = ["batch_size", "micro_batch_size", "steps", "max_abs_difference", "max_abs_gradient", "relative"]


def gradvar_tables(probes: dict, g: dict, doc_variance: dict) -> dict[str, pd.DataFrame]:
    """`stability_gradvar`: per task (`probes`: {task: its probe file, None where it is missing}) and batch size, the
    measured variance, its ratio to the largest batch's, 1/N's ratio and the document's (`doc_variance`: {batch size:
    variance}, against batch 512); `stability_accumulation`: per task, the accumulation check (the `gradvar` block
    `g`'s batch and micro-batch where the probe is missing)."""
    var_rows, acc_rows = [], []
    for task, probe in probes.items():
        status = {"task": task, "status": "complete" if probe else "missing"}
        found = {v["batch_size"]: v["variance"] for v in probe["variance"]} if probe else {}
        sizes = sorted(found or g["batch_sizes"])
        var_rows += [
            {
                **status,
                "batch_size": n,
                "variance": found.get(n, NAN),
                "ratio_to_largest": found.get(n, NAN) / found[sizes[-1]] if found.get(sizes[-1]) else NAN,
                "theory_ratio": sizes[-1] / n,
                "doc_variance": doc_variance.get(n, NAN),
                "doc_ratio": doc_variance.get(n, NAN) / doc_variance[512],
            }
            for n in sizes
        ]
        acc = probe["accumulation"] if probe else dict(zip(["batch_size", "micro_batch_size"], g["accumulation"]))
        acc_rows.append({**status, **{k: acc.get(k, NAN) for k in ACCUMULATION}})
    return {"stability_gradvar": pd.DataFrame(var_rows), "stability_accumulation": pd.DataFrame(acc_rows)}


# The probe's tables that claims read and their columns (mathrl.analysis.claim_names reads this assignment from the
# source to check a claim's names when the config is read).
CLAIM_TABLES = {
    "stability_gradvar": [
        "task",
        "status",
        "batch_size",
        "variance",
        "ratio_to_largest",
        "theory_ratio",
        "doc_variance",
        "doc_ratio",
    ],
    "stability_accumulation": ["task", "status", *ACCUMULATION],
}
