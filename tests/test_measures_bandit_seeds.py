"""The measures of a bandit seed (mathrl.analysis.measures.bandit_seeds) on hand-made seeds, and the bandit tables'
builder (mathrl.analysis.measures.tables.bandit_table) on a hand-made study."""

import math

import numpy as np
import pandas as pd
import pytest

from mathrl.analysis.measures import AMONG, BANDIT_TABLES, SEED_MEASURES
from mathrl.analysis.measures import bandit_seeds as bs
from mathrl.analysis.measures.series import window
from mathrl.analysis.measures.tables import BanditSeed, bandit_seeds, bandit_table
from mathrl.pipeline import bandit_config as bandit

CONFIG = bandit.resolve(None)  # the defaults: the arms pay 0.3, 1.0 and 0.5, so arm 1 is the global optimum


def seed_of(study: str, columns: dict, setting: str = "s", seed: int = 0, peers=(), config=CONFIG) -> BanditSeed:
    n = len(next(iter(columns.values())))
    frame = pd.DataFrame({"study": study, "setting": setting, "seed": seed, "step": range(n), **columns})
    return BanditSeed(study, setting, seed, frame, tuple(peers), config)


def value(name: str, seed: BanditSeed):
    return SEED_MEASURES[name].fn(seed)


# 6 steps: start and end are the means of 3 steps each (the window is at most half the run)
GLOBAL = seed_of(
    "entropy_collapse",
    {
        "entropy": [1.1, 1.0, 0.9, 0.5, 0.3, 0.1],
        "p0": [0.4, 0.3, 0.2, 0.1, 0.1, 0.02],
        "p1": [0.2, 0.4, 0.6, 0.8, 0.8, 0.95],  # the global arm: 0.2 at step 0, 0.95 at the end
        "p2": [0.4, 0.3, 0.2, 0.1, 0.1, 0.03],
    },
)
LOCAL = seed_of(
    "entropy_collapse",
    {"entropy": [1.0] * 3 + [0.2] * 3, "p0": [0.5] * 5 + [0.94], "p1": [0.25] * 5 + [0.03], "p2": [0.25] * 5 + [0.03]},
)


def test_entropy_collapse_measures_of_a_seed():
    assert value("initial_entropy", GLOBAL) == pytest.approx(1.0) and value(
        "final_policy_entropy", GLOBAL
    ) == pytest.approx(0.3)
    assert value("policy_entropy_reduction", GLOBAL) == pytest.approx(0.7)
    assert value("dominant_action", GLOBAL) == 1.0 and value("dominant_prob", GLOBAL) == 0.95
    assert value("converged_to", GLOBAL) == "global" and value("initial_best_prob", GLOBAL) == 0.2
    assert (value("global_share", GLOBAL), value("local_share", GLOBAL)) == (1.0, 0.0)
    assert value("moving", GLOBAL) == 1.0  # the global arm moved 0.15 over the last step (10% of 6, at least one)
    assert value("dominant_action", LOCAL) == 0.0 and value("converged_to", LOCAL) == "local"
    assert (value("global_share", LOCAL), value("local_share", LOCAL), value("moving", LOCAL)) == (0.0, 1.0, 1.0)
    flat = seed_of("entropy_collapse", {"entropy": [1.0] * 4, "p0": [0.3] * 4, "p1": [0.4] * 4, "p2": [0.3] * 4})
    assert value("converged_to", flat) == "none" and value("moving", flat) == 0.0
    assert value("policy_entropy_reduction", flat) == 0.0


def test_the_global_arm_is_the_configurations():
    """With the arms paying 1.0, 0.3 and 0.5, arm 0 is the global optimum: the same end is a local optimum."""
    config = {**CONFIG, "arm_rewards": [1.0, 0.3, 0.5]}
    moved = BanditSeed("entropy_collapse", "s", 0, GLOBAL.frame, (), config)
    assert value("converged_to", moved) == "local" and value("initial_best_prob", moved) == 0.4


PHASES = ["diverse", "diverse", "homogeneous", "homogeneous"] * 2
GRAD = [0.2, 0.4, 0.0, 0.0, 0.2, 0.4, 0.0, 0.0]


def test_vanishing_gradient_measures_of_a_seed():
    s = seed_of("gradient_vanishing", {"phase": PHASES, "grad_norm": GRAD, "reward_std": [2 * g for g in GRAD]})
    assert value("grad_norm_diverse", s) == pytest.approx(0.3) and value("grad_norm_homogeneous", s) == 0.0
    assert value("reward_std_diverse", s) == pytest.approx(0.6) and value("reward_std_homogeneous", s) == 0.0
    assert value("grad_norm_reduction", s) == 1.0 and value("corr_grad_reward_std", s) == pytest.approx(1.0)
    half = seed_of("gradient_vanishing", {"phase": PHASES, "grad_norm": [0.01, 0.01, 0.005, 0.005] * 2})
    assert value("grad_norm_reduction", half) == pytest.approx(0.5)
    short = seed_of("gradient_vanishing", {"phase": PHASES[:2], "grad_norm": [0.1, 0.2], "reward_std": [0.1, 0.3]})
    assert math.isnan(value("corr_grad_reward_std", short))  # two steps: no correlation
    rows = pd.DataFrame({"grad_norm_reduction": [0.2, 0.5, 0.9, 0.95, math.nan]})
    assert AMONG["severity"][1](rows).tolist() == ["mild", "moderate", "moderate", "severe", "unknown"]


# 30 steps: the true reward pays 0.5, then 1.0, then -0.5 (10 steps each); the proxy climbs; the overrated arm ends at
# 0.97
HACK = {
    "proxy_reward": [0.6] * 10 + [1.0] * 10 + [3.0] * 10,
    "true_reward": [0.5] * 10 + [1.0] * 10 + [-0.5] * 10,
    "p3": [0.25] * 29 + [0.97],
}


def test_reward_hacking_measures_of_a_seed():
    peer = seed_of("reward_hacking", {**HACK, "true_reward": [0.0] * 25 + [2.0] * 5}, seed=1)
    s = seed_of("reward_hacking", HACK, peers=[peer.frame])
    assert value("hack_arm", s) == 3  # the only arm the proxy was not fitted on
    assert (value("proxy_start", s), value("proxy_end", s)) == pytest.approx((0.6, 3.0))
    assert (value("true_start", s), value("true_end", s)) == pytest.approx((0.5, -0.5))
    assert value("true_peak", s) == 1.0 and value("true_peak_step", s) == 19  # the 10-step mean of steps 10-19
    # the peer's rolling mean peaks at step 29 (steps 20-29: 1.0), where this seed's is -0.5
    assert value("true_at_others_peak", s) == -0.5
    assert math.isnan(value("true_at_others_peak", seed_of("reward_hacking", HACK)))  # no other seed
    assert value("hack_share_end", s) == 0.97


def test_the_overrated_arm_is_the_highest_scored_of_those_never_labelled():
    """Lengths 1, 2, 3, 0 against true rewards 1, 2 on the labelled arms 0 and 1: the proxy is the length, so of the
    unlabelled arms 2 and 3 it overrates arm 2 (3 against 0)."""
    study = {"true_rewards": [1.0, 2.0, 0.0, 0.0], "arm_lengths": [1.0, 2.0, 3.0, 0.0], "labelled_arms": [0, 1]}
    config = {**CONFIG, "studies": {**CONFIG["studies"], "reward_hacking": study}}
    assert bs.hack_arm_of(config) == 2


def test_hacked_reads_each_rows_ends():
    rows = pd.DataFrame(
        {
            "proxy_start": [0.6, 0.6, 0.6],
            "proxy_end": [3.0, 3.0, math.nan],
            "true_start": [0.5, 0.5, 0.5],
            "true_end": [-0.5, 0.7, 0.1],
        }
    )
    assert AMONG["hacked"][1](rows).tolist() == [True, False, None]
    assert bs.hacked(0.6, 3.0, 0.5, -0.5) is True and bs.hacked(0.6, math.nan, 0.5, 0.1) is None


def test_pure_helpers():
    assert [window(n, bs.BANDIT_WINDOW) for n in (1, 4, 20, 200)] == [1, 2, 10, 10]
    assert [bs.severity(x) for x in (0.2, 0.5, 0.95, math.nan)] == ["mild", "moderate", "severe", "unknown"]
    flat = np.array([[1 / 3, 1 / 3, 1 / 3]] * 50 + [[0.02, 0.96, 0.02]] * 50)
    assert bs.still_moving(flat) is False
    rising = np.array([[0.5 - 0.004 * i, 0.004 * i, 0.5] for i in range(100)])  # 0.04 in 10 steps; 0.4 in 100
    assert bs.still_moving(rising) is False and bs.still_moving(rising, span=0.5) is True
    assert bs.still_moving(np.array([[0.3, 0.3, 0.4]])) is False  # one step: nothing to compare
    assert bs.common(pd.Series([1.0, math.nan, 1.0]), []) == 1.0 and math.isnan(bs.common(pd.Series([0.0, 1.0]), []))
    assert bs.counted(pd.Series(["local", "global", "missing", "local"]), []) == "global 1, local 2"
    assert bs.counted(pd.Series(["missing"]), []) == "missing"


def test_a_seeds_rise_is_read_where_the_other_seeds_peak():
    """The step comes from the other seeds of the setting: a seed's own noisy peak does not count."""
    s0, s1, s2 = pd.Series([0.0, 1.0, 0.0]), pd.Series([0.0, 0.0, 2.0]), pd.Series([0.0, 0.0, 1.0])
    assert bs.at_others_peak(s0, [s1, s2]) == 0.0  # the others peak at step 2, where seed 0 is back at 0
    assert bs.at_others_peak(s1, [s0, s2]) == 0.0  # seeds 0 and 2 average 0.5 at steps 1 and 2: the first
    assert bs.at_others_peak(s2, [s0, s1]) == 1.0  # seeds 0 and 1 peak at step 2 (1.0): seed 2's own peak
    assert math.isnan(bs.at_others_peak(s0, []))


def entropy_rows(setting: str, seed: int, entropy: list, last: tuple) -> pd.DataFrame:
    p = {f"p{i}": [1 / 3] * (len(entropy) - 1) + [last[i]] for i in range(3)}
    return pd.DataFrame({"setting": setting, "seed": seed, "step": range(len(entropy)), "entropy": entropy, **p})


def test_a_bandit_table_holds_each_seed_then_its_settings_pooled_row():
    """Settings a and b, seeds 0 and 1; b's seed 1 is missing: a row of NaN with n = 0 and converged_to 'missing'."""
    cfg = {"bandit": {"seeds": [0, 1], "studies": {"entropy_collapse": {"settings": {"a": {}, "b": {}}}}}}
    df = pd.concat(
        [
            entropy_rows("a", 1, [1.1, 0.9, 0.5, 0.3], (0.94, 0.03, 0.03)),  # written out of order: the config's wins
            entropy_rows("a", 0, [1.1, 0.9, 0.3, 0.1], (0.02, 0.95, 0.03)),
            entropy_rows("b", 0, [1.1, 1.1, 0.9, 0.9], (0.3, 0.4, 0.3)),
        ]
    )
    seeds = bandit_seeds(cfg, "entropy_collapse", df)
    assert [(s.setting, s.seed, len(s.frame), len(s.peers)) for s in seeds] == [
        ("a", 0, 4, 1),
        ("a", 1, 4, 1),
        ("b", 0, 4, 0),
        ("b", 1, 0, 1),
    ]
    t = bandit_table(BANDIT_TABLES["lab04_entropy"], seeds)
    assert list(t["seed"]) == [0, 1, "all", 0, 1, "all"] and list(t["n"]) == [1, 1, 2, 1, 0, 1]
    a = t.iloc[2]  # final entropies 0.2 and 0.4; the seeds end at arms 1 and 0
    assert a.final_policy_entropy == pytest.approx(0.3) and a.final_policy_entropy_std == pytest.approx(np.sqrt(0.02))
    assert a.converged_to == "global 1, local 1" and math.isnan(a.dominant_action) and a.local_share == 0.5
    assert t.iloc[4].converged_to == "missing" and math.isnan(t.iloc[4].initial_entropy)
    b = t.iloc[5]
    assert b.converged_to == "none 1" and b.dominant_action == 1.0 and math.isnan(b.final_policy_entropy_std)
    assert list(t.columns[:3]) == ["setting", "seed", "initial_entropy"] and t.columns[-1] == "moving_std"


def test_a_bandit_tables_pooled_row_of_the_hacking_study():
    """The arm is the configuration's, on a missing seed's row too; `hacked` is judged on the pooled values."""
    cfg = {"bandit": {"seeds": [0, 1, 2]}}
    df = pd.concat(
        [pd.DataFrame({"setting": "default", "seed": s, "step": range(30), **HACK}) for s in (0, 1)], ignore_index=True
    )
    t = bandit_table(BANDIT_TABLES["lab04_hacking"], bandit_seeds(cfg, "reward_hacking", df))
    assert list(t["hack_arm"]) == [3, 3, 3, 3] and list(t["n"]) == [1, 1, 0, 2]
    assert list(t["hacked"]) == [True, True, None, True]
    assert list(t["true_at_others_peak"][:2]) == [1.0, 1.0]  # each seed's peer peaks at step 19, like itself
    assert t.iloc[3].true_end == pytest.approx(-0.5) and t.iloc[3].true_end_std == 0.0


def test_the_pooled_correlation_is_over_every_step_of_every_seed():
    """Two seeds each perfectly correlated, along different lines: the pooled row's correlation is over their steps,
    its spread that of the two seeds' correlations."""
    cfg = {"bandit": {"seeds": [0, 1], "studies": {"gradient_vanishing": {"phase_steps": 2}}}}
    grad, phases = [1.0, 2.0, 3.0, 4.0], ["diverse"] * 2 + ["homogeneous"] * 2
    rows = [
        pd.DataFrame({"setting": "default", "seed": s, "step": range(4), "phase": phases, "grad_norm": grad}).assign(
            reward_std=[k * x for x in grad]
        )
        for s, k in ((0, 1.0), (1, -1.0))
    ]
    t = bandit_table(BANDIT_TABLES["lab04_vanishing"], bandit_seeds(cfg, "gradient_vanishing", pd.concat(rows)))
    assert list(t["corr_grad_reward_std"][:2]) == pytest.approx([1.0, -1.0])
    pooled = t.iloc[2]
    assert pooled.corr_grad_reward_std == pytest.approx(0.0) and pooled.corr_grad_reward_std_std == pytest.approx(
        np.sqrt(2)
    )
    assert pooled.grad_norm_diverse == 1.5 and pooled.grad_norm_reduction == pytest.approx(1 - 3.5 / 1.5)
    assert pooled.severity == "mild"


def test_where_each_settings_seeds_converged():
    """Setting a: seeds at the global and a local optimum, one still moving; b: one seed at neither. The pooled rows
    are left out of the counts."""
    t = pd.DataFrame(
        {
            "setting": ["a", "a", "a", "b", "b"],
            "seed": [0, 1, "all", 0, "all"],
            "converged_to": ["global", "local", "global 1, local 1", "none", "none 1"],
            "moving": [0.0, 1.0, 0.5, 0.0, 0.0],
            "initial_best_prob": [0.2, 0.4, 0.3, 1 / 3, 1 / 3],
        }
    )
    assert bs.seed_rows(t)["seed"].tolist() == [0, 1, 0] and bs.seed_rows(t, pooled=True)["setting"].tolist() == [
        "a",
        "b",
    ]
    lo = bs.local_optima(t).set_index("setting")
    a, b = lo.loc["a"], lo.loc["b"]
    assert (a["n"], a["global"], a["local"], a["none"], a["moving"], a["local_rate"]) == (2, 1, 1, 0, 1, 0.5)
    assert (a["local_rate_lo"], a["local_rate_hi"]) == pytest.approx((0.0945, 0.9055), abs=1e-4)  # Wilson, 1 of 2
    assert a["initial_best_prob"] == pytest.approx(0.3) and (b["none"], b["local_rate"]) == (1, 0.0)
    empty = bs.local_optima(pd.DataFrame(columns=t.columns))
    assert empty.empty and list(empty.columns)[:6] == ["setting", "n", "global", "local", "none", "moving"]


def test_the_gradient_vanishing_steps_and_the_curves_across_seeds():
    """Two seeds of 4 steps: every step a point; the curves are each step's mean, std and n over the seeds, of the
    metrics a study logged, with a missing phase read as ""."""
    cfg = {"bandit": {"seeds": [0, 1], "studies": {"gradient_vanishing": {"phase_steps": 2}}}}
    phases = ["diverse"] * 2 + ["homogeneous"] * 2
    df = pd.concat(
        [
            pd.DataFrame(
                {"study": "gradient_vanishing", "setting": "default", "seed": s, "step": range(4), "phase": phases}
            ).assign(grad_norm=[1.0 + s, 2.0, 0.0, 0.0], reward_std=0.5, entropy=1.0)
            for s in (0, 1)
        ],
        ignore_index=True,
    )
    points = bs.vanishing_points(bandit_seeds(cfg, "gradient_vanishing", df))
    assert list(points.columns) == bs.POINT_COLUMNS and len(points) == 8
    assert bs.vanishing_points([]).columns.tolist() == bs.POINT_COLUMNS
    hacking = pd.DataFrame({"study": "reward_hacking", "setting": "default", "seed": 0, "step": [0], "phase": [None]})
    c = bs.bandit_curves([None, df, hacking.assign(true_reward=0.5)])
    g = c[c["study"] == "gradient_vanishing"]
    assert g["step"].tolist() == [0, 1, 2, 3] and g["n"].tolist() == [2] * 4
    assert g["grad_norm_mean"].tolist() == [1.5, 2.0, 0.0, 0.0] and g["grad_norm_std"].iloc[0] == pytest.approx(
        np.sqrt(0.5)
    )
    assert {"entropy_mean", "reward_std_std"} <= set(c.columns) and "loss_mean" not in c
    assert c[c["study"] == "reward_hacking"]["phase"].tolist() == [""]
    assert bs.bandit_curves([None]).columns.tolist() == ["study", "setting", "step", "phase", "n"]
