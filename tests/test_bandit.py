"""Lab 04's bandit studies (mathrl.engine.bandit): contract, determinism and the three phenomena."""

import copy
import math
from pathlib import Path

import jsonschema
import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from mathrl.engine import bandit
from mathrl.engine.bandit import BANDIT_STUDIES, DEFAULTS, converged_to, run_study, write_study

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ["study", "setting", "seed", "step", "phase", "entropy", "p0", "p1", "p2", "loss", "grad_norm", "reward_std"]
SHORT = {"steps": 30, "seeds": [0, 1]}


@pytest.fixture(scope="module")
def studies():
    """Every study at its defaults (3 seeds, 200 steps): about two seconds."""
    return {name: run_study(name, DEFAULTS) for name in BANDIT_STUDIES}


def test_columns_and_phases(studies):
    for name, df in studies.items():
        assert list(df.columns[:9]) == CONTRACT[:9]  # study .. p2 first, in the contract's order
        assert set(CONTRACT + ["reward_mean", "proxy_reward", "true_reward", "lr", "entropy_coef"]) <= set(df.columns)
        assert (df.study == name).all()
        assert len(df) == len(df.groupby(["setting", "seed"])) * DEFAULTS["steps"]
        assert sorted(df.seed.unique()) == DEFAULTS["seeds"]
        assert df[["entropy", "loss", "grad_norm", "reward_std"]].notna().all().all()
    assert set(studies["gradient_vanishing"].phase) == {"homogeneous", "diverse"}
    assert (studies["entropy_collapse"].phase == "").all() and (studies["reward_hacking"].phase == "").all()
    assert set(studies["entropy_collapse"].setting) == {"aggressive", "normal"}
    assert "p3" in studies["reward_hacking"].columns and "p3" not in studies["entropy_collapse"].columns
    probs = studies["reward_hacking"][["p0", "p1", "p2", "p3"]].sum(axis=1)
    assert probs.sub(1).abs().max() < 1e-5


def test_deterministic_per_seed():
    a = run_study("entropy_collapse", SHORT)
    b = run_study("entropy_collapse", SHORT)
    pd.testing.assert_frame_equal(a, b)
    one = run_study("entropy_collapse", {**SHORT, "seeds": [1]})
    pd.testing.assert_frame_equal(one.reset_index(drop=True), a[a.seed == 1].reset_index(drop=True))
    assert not a[a.seed == 0].p1.reset_index(drop=True).equals(a[a.seed == 1].p1.reset_index(drop=True))


def reference_rows(name: str, cfg: dict, setting: str, seed: int) -> list[list]:
    """The straightforward trainer the batched one must match: one seed, its own SimplePolicy
    and Adam, the study's signal called on that seed alone."""
    cfg = bandit.resolve(cfg)
    study = cfg["studies"][name]
    run = {
        **{k: cfg[k] for k in (*bandit.SHARED_KEYS, "state_dim")},
        **bandit.SETTING_DEFAULTS,
        **study["settings"][setting],
    }
    signal, n_arms, init_logits = bandit.study_signal(name, study, run, torch.tensor(cfg["arm_rewards"]))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        policy = bandit.SimplePolicy(run["state_dim"], run["hidden"], n_arms, init_logits)
    opt = torch.optim.Adam(policy.parameters(), lr=run["lr"])
    gen = torch.Generator().manual_seed(seed)
    state = torch.ones(run["state_dim"])
    rows = []
    for step in range(run["steps"]):
        logp = torch.log_softmax(policy(state), dim=-1)
        probs = logp.exp()
        entropy = -(probs * logp).sum()
        actions = torch.multinomial(probs.detach(), run["batch_size"], replacement=True, generator=gen)
        rewards, extras = signal(actions[None], step, [gen])
        rewards = rewards[0]
        loss = -(logp[actions] * (rewards - rewards.mean())).mean() - run["entropy_coef"] * entropy
        opt.zero_grad()
        loss.backward()
        grad_norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in policy.parameters()))
        opt.step()
        rows.append(
            [
                extras["phase"],
                entropy.item(),
                *probs.tolist(),
                loss.item(),
                grad_norm.item(),
                rewards.std(correction=0).item(),
                rewards.mean().item(),
                extras["proxy_reward"].item(),
                extras["true_reward"].item(),
            ]
        )
    return rows


@pytest.mark.parametrize("name", BANDIT_STUDIES)
def test_batched_seeds_match_one_seed_at_a_time(name):
    biased = {"lr": 5e-3, "entropy_coef": 1e-3, "init_logits": [0.0, -4.0, 1.0], "reward_noise": 0.5}
    studies = {
        "entropy_collapse": {"settings": {"normal": {"lr": 1e-3, "entropy_coef": 0.01}, "biased": biased}},
        "gradient_vanishing": {"phase_steps": 5},
    }
    cfg = {
        "steps": 25,
        "seeds": [0, 3, 7],
        "reward_noise": 0.2,
        "studies": {k: v for k, v in studies.items() if k == name},
    }
    df = run_study(name, cfg)
    metrics = [c for c in df.columns[4:] if c not in ("lr", "entropy_coef")]
    for (setting, seed), got in df.groupby(["setting", "seed"], sort=False):
        want = pd.DataFrame(reference_rows(name, cfg, setting, seed), columns=metrics)
        assert list(got.phase) == list(want.phase)
        np.testing.assert_allclose(got[metrics[1:]].to_numpy(), want[metrics[1:]].to_numpy(), rtol=1e-5, atol=1e-6)


def test_uniform_start(studies):
    first = studies["entropy_collapse"].query("step == 0")
    assert first.entropy.sub(math.log(3)).abs().max() < 1e-6
    assert first[["p0", "p1", "p2"]].sub(1 / 3).abs().max().max() < 1e-6


def test_gradient_vanishes_when_rewards_are_equal(studies):
    df = studies["gradient_vanishing"]
    assert (df.entropy_coef == 0).all()
    homo, diverse = df[df.phase == "homogeneous"], df[df.phase == "diverse"]
    assert homo.grad_norm.max() < 1e-6 and (homo.reward_std == 0).all()
    assert diverse.grad_norm.mean() > 1e-3
    assert 1 - homo.grad_norm.mean() / diverse.grad_norm.mean() > 0.9
    # phases alternate every phase_steps steps, diverse first
    steps = DEFAULTS["studies"]["gradient_vanishing"]["phase_steps"]
    seed0 = df[df.seed == 0]
    assert (seed0.phase == seed0.step.map(lambda s: "homogeneous" if (s // steps) % 2 else "diverse")).all()


def test_entropy_bonus_keeps_a_small_gradient():
    cfg = {**SHORT, "studies": {"gradient_vanishing": {"settings": {"bonus": {"lr": 1e-3, "entropy_coef": 0.01}}}}}
    homo = run_study("gradient_vanishing", cfg).query("phase == 'homogeneous'")
    assert homo.grad_norm.mean() > 1e-6  # the bonus's gradient (zero only at the uniform policy)


def test_aggressive_setting_collapses_faster(studies):
    df = studies["entropy_collapse"]
    final = df[df.step == df.step.max()].groupby("setting").entropy.mean()
    assert final["aggressive"] < final["normal"]
    assert final["aggressive"] < 0.2 * math.log(3)


def test_reward_hacking(studies):
    df = studies["reward_hacking"]
    per_step = df.groupby("step")[["proxy_reward", "true_reward"]].mean()
    first, last = per_step.iloc[:10].mean(), per_step.iloc[-10:].mean()
    assert last.proxy_reward > first.proxy_reward
    assert last.true_reward < first.true_reward
    assert last.true_reward < 0  # the exploit's true reward is negative
    assert per_step.true_reward.rolling(10).mean().max() > first.true_reward  # a rise before the fall
    assert df.query("step == 0").p3.max() < 0.05  # the exploit starts rare


def test_proxy_ranks_the_hack_highest():
    hack = DEFAULTS["studies"]["reward_hacking"]
    proxy = bandit.fit_proxy(hack["arm_lengths"], hack["true_rewards"], hack["labelled_arms"])
    assert int(proxy.argmax()) == 3 and hack["true_rewards"][3] < 0
    assert proxy[1] > proxy[2] > proxy[0]  # the ranking of the labelled arms is right


def test_converged_to():
    assert converged_to(0.02, 0.95, 0.03) == "global"
    assert converged_to(0.96, 0.02, 0.02) == "local"
    assert converged_to(0.01, 0.04, 0.95) == "local"
    assert converged_to(0.3, 0.4, 0.3) == "none"
    assert converged_to(0.05, 0.85, 0.10) == "none"
    assert converged_to(0.05, 0.85, 0.10, threshold=0.8) == "global"


def test_unknown_study():
    with pytest.raises(ValueError, match="entropy_collapse, gradient_vanishing, reward_hacking"):
        run_study("entropy_colapse", DEFAULTS)
    with pytest.raises(ValueError, match="allowed"):
        run_study("entropy_collapse", {"studies": {"nope": {}}})


def test_partial_config_is_merged_over_defaults():
    df = run_study(
        "entropy_collapse",
        {"steps": 5, "seeds": [3], "studies": {"entropy_collapse": {"settings": {"x": {"lr": 0.01}}}}},
    )
    assert len(df) == 5 and set(df.setting) == {"x"} and (df.entropy_coef == 0.01).all() and (df.lr == 0.01).all()
    assert DEFAULTS["steps"] == 200  # the defaults are not mutated


def test_reward_noise_is_seeded():
    cfg = {**SHORT, "reward_noise": 0.1}
    a, b = run_study("entropy_collapse", cfg), run_study("entropy_collapse", cfg)
    pd.testing.assert_frame_equal(a, b)
    assert not a.reward_mean.equals(run_study("entropy_collapse", SHORT).reward_mean)


def test_write_study_atomic(tmp_path):
    df = run_study("gradient_vanishing", {"steps": 4, "seeds": [0]})
    path = write_study(df, tmp_path / "bandit" / "gradient_vanishing" / "metrics.csv")
    back = pd.read_csv(path, keep_default_na=False)
    assert list(back.columns) == list(df.columns) and len(back) == 4
    assert list(back.phase) == ["diverse"] * 4
    assert [p.name for p in path.parent.iterdir()] == ["metrics.csv"]  # no temp file left


def test_csv_text_is_to_csv(studies):
    for df in studies.values():
        assert all(bandit.csv_cells(df[name]) is not None for name in df.columns)  # no column left to to_csv
        assert bandit.csv_text(df) == df.to_csv(index=False, lineterminator="\n")
    floats = [0.0, -0.0, math.nan, 1e-05, 0.0001, 1e16, 123456789.0, -2.5e-300, math.inf, 0.1 + 0.2]
    edge = pd.DataFrame({"x": floats, "n": range(10), "s": ["", "a"] * 5, "f32": np.float32(floats)})
    quoted, missing = edge.assign(s=["a,b"] * 10), edge.assign(s=[None, "a"] * 5)
    for frame in (edge[["x", "n", "s"]], edge, quoted, missing, edge[["s"]]):
        assert bandit.csv_text(frame) == frame.to_csv(index=False, lineterminator="\n")


def _bandit_schema():
    """The root schema (the bandit block and its definitions live there)."""
    return yaml.safe_load((ROOT / "config" / "config.schema.yaml").read_text())


def test_schema_defaults_match_module_defaults():
    schema = _bandit_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    sub = {"$schema": schema.get("$schema"), **schema["properties"]["bandit"], "definitions": schema["definitions"]}
    jsonschema.validate(DEFAULTS, sub)
    assert schema["properties"]["bandit"]["default"] == DEFAULTS
    for key, prop in schema["properties"]["bandit"]["properties"].items():
        assert prop["default"] == DEFAULTS[key], key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**copy.deepcopy(DEFAULTS), "stepz": 3}, sub)
