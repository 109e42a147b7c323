"""The bandit studies' configuration, without torch: study names, the schema's defaults,
`resolve` (a partial `bandit:` block over the defaults) and `converged_to`.

The tables, figures, report and Snakemake's DAG read these; only the simulation
(`mathrl.engine.bandit`, which re-exports them) needs torch.
"""

from __future__ import annotations

import copy

from mathrl.pipeline.config import load_schema

BANDIT_STUDIES = ("entropy_collapse", "gradient_vanishing", "reward_hacking")
COLUMNS = [
    "study",
    "setting",
    "seed",
    "step",
    "phase",
    "entropy",
    "p0",
    "p1",
    "p2",
    "loss",
    "grad_norm",
    "reward_std",
    "reward_mean",
    "proxy_reward",
    "true_reward",
    "lr",
    "entropy_coef",
]
SHARED_KEYS = ("steps", "batch_size", "hidden", "reward_noise")  # a setting may override these
# The defaults are the schema's (config/config.schema.yaml): one source of truth for the
# CLI, Snakemake and direct callers.
_SCHEMA = load_schema()
DEFAULTS = _SCHEMA["properties"]["bandit"]["default"]
SETTING_DEFAULTS = {
    k: v["default"] for k, v in _SCHEMA["definitions"]["bandit_setting"]["properties"].items() if "default" in v
}


def converged_to(p0: float, p1: float, p2: float, threshold: float = 0.9, best_arm: int = 1) -> str:
    """'global' if the dominant arm (probability >= threshold) is the best arm, 'local' if it
    is another arm, 'none' if no arm reaches the threshold."""
    probs = [p0, p1, p2]
    top = max(range(3), key=probs.__getitem__)
    if probs[top] < threshold:
        return "none"
    return "global" if top == best_arm else "local"


def study_seeds(cfg: dict, study: str) -> list[int]:
    """The seeds of one study of a resolved block: 0..n_seeds-1 where the study sets n_seeds, else the shared seeds."""
    n = cfg["studies"][study].get("n_seeds")
    return list(range(int(n))) if n else [int(s) for s in cfg["seeds"]]


def resolve(cfg: dict | None) -> dict:
    """`DEFAULTS` with `cfg` merged over it; a study's `settings` are replaced, not merged."""
    out = copy.deepcopy(DEFAULTS)
    cfg = copy.deepcopy(cfg or {})
    for name, study in cfg.pop("studies", {}).items():
        if name not in BANDIT_STUDIES:
            raise ValueError(f"unknown bandit study {name!r}; allowed: {', '.join(BANDIT_STUDIES)}")
        out["studies"][name].update(study)
    out.update(cfg)
    return out


def proxy_scores(lengths, rewards, labelled_arms) -> list[float]:
    """The proxy reward model of the reward-hacking study: score = a + b * length, fitted by
    least squares on the labelled arms' true rewards, then applied to every arm. On arms
    0-2 longer answers happen to be better, so the fit rewards length and extrapolates to
    the unseen padded arm."""
    x = [float(lengths[a]) for a in labelled_arms]
    y = [float(rewards[a]) for a in labelled_arms]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxx = sum((xi - mx) ** 2 for xi in x)
    b = sum((xi - mx) * (yi - my) for xi, yi in zip(x, y)) / sxx if sxx else 0.0
    a = my - b * mx
    return [a + b * float(length) for length in lengths]
