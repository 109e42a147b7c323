"""Configuration: schema validation, defaults, overrides, grid expansion, CLI bad input."""

from __future__ import annotations

import copy

import pytest

from mathrl.analysis.results import load_runs
from mathrl.pipeline.cli import main
from mathrl.pipeline.config import (
    DEFAULT_CONFIG,
    ConfigError,
    expand_runs,
    layered,
    load_config,
    parse_value,
    trained_runs,
)
from tests.conftest import TINY, write_config


def test_default_config_loads_and_fills_defaults():
    cfg = load_config()
    assert cfg["train"]["kl_estimator"] == "k3"  # a schema default
    assert cfg["tasks"]["add"]["reverse"] is True
    assert set(cfg["sft"]) == set(cfg["tasks"])
    assert expand_runs(cfg)


def test_grid_expansion_and_run_ids(tiny_cfg_dict, tmp_path):
    tiny_cfg_dict["experiments"]["ab"] = {
        "fixed": {"lr": 1.0e-3},
        "variants": {"A": {"algorithm": "dapo"}, "B": {"lr_schedule": "step"}},
        "grid": {"grad_clip": [None, 0.5]},
        "seeds": [0, 3],
    }
    cfg = load_config([write_config(tmp_path / "c.yaml", tiny_cfg_dict)])
    runs = {k: v for k, v in expand_runs(cfg).items() if v.experiment == "ab"}
    assert len(runs) == 2 * 2 * 2
    a = runs["ab__A_grad_clip-none__s3"]
    assert a.settings.grad_clip is None and a.settings.seed == 3 and a.settings.lr == 1.0e-3
    # the dapo preset applies beneath the experiment's own settings
    assert a.settings.dynamic_sampling is True and a.settings.clip_eps_high == 0.28
    b = runs["ab__B_grad_clip-0.5__s0"]
    assert b.settings.lr_schedule == "step" and b.settings.dynamic_sampling is False


def test_overrides_and_merge(tiny_cfg_dict, tmp_path):
    base = write_config(tmp_path / "a.yaml", tiny_cfg_dict)
    extra = write_config(tmp_path / "b.yaml", {"train": {"lr": 0.5}})
    cfg = load_config([base, extra], ["train.steps=7", "tasks.add.ndigit=3"])
    assert cfg["train"]["lr"] == 0.5 and cfg["train"]["steps"] == 7 and cfg["tasks"]["add"]["ndigit"] == 3
    assert cfg["train"]["batch_size"] == 16  # untouched by the second file


@pytest.mark.parametrize(
    "text, value", [("1e-3", 1e-3), ("512", 512), ("none", None), ("true", True), ("[1, 2]", [1, 2]), ("k3", "k3")]
)
def test_parse_value(text, value):
    assert parse_value(text) == value


BAD = [
    ("train.batch_size=-4", "train.batch_size"),
    ("train.algorithm=ppo2", "allowed: reinforce, ppo, grpo, rloo, dapo"),
    ("train.lrr=0.1", "did you mean 'lr'"),
    ("tasks.add.ndigit=0", "tasks.add.ndigit"),
    ("train.lr=fast", "train.lr"),
    ("train.batch_size=10", "multiple of group_size"),
    ("train.task=ad", "did you mean 'add'"),
    ("experiments.tiny.grid.batch_size=[]", "experiments.tiny.grid.batch_size"),
    ("experiments.tiny.fixed.lrr=1", "did you mean 'lr'"),
]


@pytest.mark.parametrize("override, needle", BAD)
def test_bad_config_is_refused_with_the_key(tiny_cfg_dict, tmp_path, override, needle):
    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    with pytest.raises(ConfigError) as err:
        load_config([path], [override])
    assert needle in str(err.value)


def test_cli_bad_input_exits_2_and_writes_nothing(tiny_cfg_dict, tmp_path, capsys):
    path = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    results = tmp_path / "results"
    cases = [
        ["problems", "--config", str(path), "--set", "tasks.add.ndigit=0"],
        ["problems", "--config", str(tmp_path / "missing.yaml")],
        ["problems", "--config", str(path), "--task", "sub"],
        ["train", "--config", str(path), "batch_size=-1"],
        ["train", "--config", str(path), "algorithm=sarsa"],
        ["train", "--config", str(path), "batch_size=10"],
        ["train", "--config", str(path), "lr=abc"],
        ["train", "--config", str(path), "--run", "tiny__batch_size-9__s0"],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "error:" in err and len(err.strip().splitlines()) <= 3, err
    (tmp_path / "bad.yaml").write_text("tasks: {add: [1, 2\n")
    assert main(["problems", "--config", str(tmp_path / "bad.yaml")]) == 2
    assert "malformed YAML" in capsys.readouterr().err
    assert not results.exists()


def test_grid_with_zero_runs_is_refused(tiny_cfg_dict, tmp_path):
    cfg = copy.deepcopy(tiny_cfg_dict)
    cfg["experiments"]["empty"] = {"grid": {"lr": []}, "seeds": [0]}
    with pytest.raises(ConfigError, match="experiments.empty"):
        load_config([write_config(tmp_path / "c.yaml", cfg)])


def test_run_ids_do_not_depend_on_key_order(tiny_cfg_dict, tmp_path):
    tiny_cfg_dict["experiments"]["g"] = {"grid": {"lr": [0.001], "batch_size": [8]}, "seeds": [0]}
    a = set(expand_runs(load_config([write_config(tmp_path / "a.yaml", tiny_cfg_dict)])))
    tiny_cfg_dict["experiments"]["g"]["grid"] = {"batch_size": [8], "lr": [0.001]}
    b = set(expand_runs(load_config([write_config(tmp_path / "b.yaml", tiny_cfg_dict)])))
    assert a == b and "g__batch_size-8_lr-0.001__s0" in a


def test_lr_scale_states_a_learning_rate_relative_to_the_reference(tiny_cfg_dict, tmp_path):
    tiny_cfg_dict["experiments"]["rel"] = {"variants": {"ref": {}, "hot": {"lr_scale": 5}}, "seeds": [0]}
    tiny_cfg_dict["experiments"]["own"] = {
        "fixed": {"lr": 1.0e-3},
        "variants": {"ref": {}, "hot": {"lr_scale": 2}},
        "seeds": [0],
    }
    runs = expand_runs(load_config([write_config(tmp_path / "a.yaml", tiny_cfg_dict)]))
    base = tiny_cfg_dict["train"]["lr"]
    assert runs["rel__ref__s0"].settings.lr == base and runs["rel__hot__s0"].settings.lr == pytest.approx(5 * base)
    assert runs["own__hot__s0"].settings.lr == pytest.approx(2.0e-3)  # scales the experiment's own lr
    tiny_cfg_dict["train"]["lr"] = 1.0e-4  # a new reference moves the aggressive setting with it
    again = expand_runs(load_config([write_config(tmp_path / "b.yaml", tiny_cfg_dict)]))
    assert again["rel__hot__s0"].settings.lr == pytest.approx(5.0e-4)


def test_a_layered_lr_on_a_variant_with_lr_scale_is_refused(tiny_cfg_dict, tmp_path):
    """A file layered over another merges a variant's keys: an absolute lr there times the
    base file's lr_scale would silently train at the product (full.yaml once ran lab 04's
    'aggressive' at 10x the reference instead of 2x)."""
    tiny_cfg_dict["experiments"]["rel"] = {"variants": {"ref": {}, "hot": {"lr_scale": 2}}, "seeds": [0]}
    base = write_config(tmp_path / "base.yaml", tiny_cfg_dict)
    assert expand_runs(load_config([base]))["rel__hot__s0"].settings.lr == pytest.approx(
        2 * tiny_cfg_dict["train"]["lr"]
    )
    over = tmp_path / "over.yaml"
    over.write_text("experiments:\n  rel:\n    variants:\n      hot: {lr: 5.0e-4}\n")
    with pytest.raises(
        ConfigError, match=r"experiments\.rel\.variants\.hot: sets both lr \(0\.0005\) and lr_scale \(2\)"
    ):
        load_config([base, over])


def test_two_runs_of_one_experiment_with_equal_settings_are_refused(tiny_cfg_dict, tmp_path):
    """A grid key that repeats what a variant sets makes cells that test nothing."""
    tiny_cfg_dict["experiments"]["dup"] = {
        "variants": {"clip1": {"grad_clip": 1.0}, "clip2": {"grad_clip": 2.0}},
        "grid": {"grad_clip": [1.0]},
        "seeds": [0],
    }
    with pytest.raises(
        ConfigError,
        match="experiments.dup: runs dup__clip1_grad_clip-1__s0 and dup__clip2_grad_clip-1__s0 have the same settings",
    ):
        load_config([write_config(tmp_path / "a.yaml", tiny_cfg_dict)])


def test_full_yaml_keeps_the_defaults_multiples_of_the_reference_lr():
    """Aggressive settings mean the same at both scales: each variant's LR over its
    experiment's reference LR is the default's ratio in config/full.yaml too."""
    default, full = load_config(), load_config(layered([DEFAULT_CONFIG.parent / "full.yaml"]))
    for name, exp in default["experiments"].items():
        ref = exp.get("roles", {}).get("reference")
        scaled = [v for v, block in (exp.get("variants") or {}).items() if (block or {}).get("lr_scale", 1.0) != 1.0]
        if not ref or ref not in (exp.get("variants") or {}) or not scaled:
            continue
        ref_scale = (exp["variants"][ref] or {}).get("lr_scale", 1.0)  # a reference may itself be a multiple
        for cfg_ratio in [default, full]:
            runs = expand_runs(cfg_ratio)
            seed = cfg_ratio["experiments"][name]["seeds"][0]
            ref_lr = runs[f"{name}__{ref}__s{seed}"].settings.lr
            for variant in scaled:
                ratio = runs[f"{name}__{variant}__s{seed}"].settings.lr / ref_lr
                want = exp["variants"][variant]["lr_scale"] / ref_scale
                assert ratio == pytest.approx(want), (name, variant, ratio)


def test_a_run_with_another_experiments_settings_is_trained_once_and_read_by_both(tiny_cfg_dict, tmp_path):
    tiny_cfg_dict["experiments"]["again"] = {
        "variants": {"same": {"batch_size": 16}, "other": {"batch_size": 32}},
        "seeds": [1, 5],
    }
    cfg = load_config([write_config(tmp_path / "a.yaml", tiny_cfg_dict)])
    runs, trained = expand_runs(cfg), trained_runs(cfg)
    # the tiny grid's batch 16, seed 1 has again__same__s1's settings: the smaller id trains
    assert runs["tiny__batch_size-16__s1"].same_as == "again__same__s1" and runs["again__same__s1"].same_as is None
    assert (
        runs["again__same__s5"].same_as is None and runs["again__other__s1"].same_as is None
    )  # seed 5 / batch 32 are new
    assert set(trained) == set(runs) - {"tiny__batch_size-16__s1"}
    alias = runs["tiny__batch_size-16__s1"]
    assert alias.trained_as == "again__same__s1" and alias.experiment == "tiny" and alias.point == {"batch_size": 16}
    # the pipeline dumps the config with sorted keys for the CLI: the same run must train whatever the order
    reordered = {**tiny_cfg_dict, "experiments": dict(reversed(list(tiny_cfg_dict["experiments"].items())))}
    assert set(trained_runs(load_config([write_config(tmp_path / "b.yaml", reordered)]))) == set(trained)
    source = tmp_path / "results" / "runs" / "again__same__s1"
    source.mkdir(parents=True)
    (source / "summary.json").write_text('{"status": "complete"}')
    (source / "metrics.csv").write_text("step\n1\n")
    loaded = load_runs(cfg)
    assert loaded["tiny__batch_size-16__s1"].status == "complete" and loaded["tiny__batch_size-16__s1"].spec == alias
    assert loaded["again__same__s5"].status == "missing"


def test_config_files_layer_over_the_default_unless_standalone(tmp_path, capsys):
    """`--config FILE` overrides config/config.yaml key by key, as Snakemake's --configfile
    does; a file that says `standalone: true` is read alone."""
    assert main(["runs", "--config", str(DEFAULT_CONFIG.parent / "full.yaml"), "--experiment", "batch"]) == 0
    # full.yaml sets the batch study's steps only: the default's variants and seeds stand, their runs longer
    listed = capsys.readouterr().out.split()
    assert listed == [r for r, spec in expand_runs(load_config()).items() if spec.experiment == "batch"]
    full = load_config(layered([DEFAULT_CONFIG.parent / "full.yaml"]))
    assert all(spec.settings.steps == 200 for r, spec in expand_runs(full).items() if spec.experiment == "batch")
    two_lines = tmp_path / "steps.yaml"
    two_lines.write_text("train:\n  steps: 7\n")
    cfg = load_config(layered([two_lines]))
    default = load_config()
    assert cfg["train"]["steps"] == 7 and cfg["experiments"] == default["experiments"]
    assert main(["runs", "--config", str(two_lines)]) == 0
    assert capsys.readouterr().out.split() == list(expand_runs(default))
    alone = write_config(tmp_path / "alone.yaml", {**TINY, "results": str(tmp_path)})
    assert main(["runs", "--config", str(alone)]) == 0
    assert capsys.readouterr().out.split() == [
        "tiny__batch_size-8__s0",
        "tiny__batch_size-8__s1",
        "tiny__batch_size-16__s0",
        "tiny__batch_size-16__s1",
    ]


def test_every_yaml_1_2_float_form_is_a_number_in_a_config_file(tiny_cfg_dict, tmp_path):
    """PyYAML reads YAML 1.1, where `1e-3` (no dot) and `1.0e3` (no exponent sign) are text."""
    base = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    mine = tmp_path / "mine.yaml"
    mine.write_text("train:\n  lr: 1e-3\n  kl_coef: 1.0e-2\n  weight_decay: 5E-1\nexperiments:\n"
                    "  tiny: {grid: {lr: [2e-4, 3e-4]}, seeds: [0]}\n")  # fmt: skip
    cfg = load_config([base, mine])
    assert (cfg["train"]["lr"], cfg["train"]["kl_coef"], cfg["train"]["weight_decay"]) == (1e-3, 1e-2, 0.5)
    assert {spec.settings.lr for spec in expand_runs(cfg).values()} == {2e-4, 3e-4}
    assert load_config([base], ["train.lr=1e-3"])["train"]["lr"] == 1e-3  # the same on the command line
    from mathrl.pipeline.config import safe_load, yaml12_numbers

    assert safe_load("a: '1e-3'\nb: 12\nc: 1_000")["a"] == "1e-3"  # quoted text stays text, integers stay integers
    assert yaml12_numbers({"a": ["1e-3", "x1e3"], "b": "12"}) == {"a": [1e-3, "x1e3"], "b": "12"}


@pytest.mark.parametrize("text", ["train:\n  lr: .inf\n", "train:\n  kl_coef: .nan\n", "train:\n  lr: -.inf\n"])
def test_a_non_finite_number_is_refused_naming_the_key_and_file(tiny_cfg_dict, tmp_path, text):
    base = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"train\.(lr|kl_coef): .* is not a finite number.*bad\.yaml"):
        load_config([base, tmp_path / "bad.yaml"])


def test_an_error_in_an_experiments_block_names_that_block_and_its_file(tiny_cfg_dict, tmp_path):
    base = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    mine = write_config(tmp_path / "mine.yaml", {"experiments": {"e1": {
        "fixed": {"batchsize": 8}, "variants": {"a": {}, "b": {"lr": 0.01}}, "seeds": [0]}}})  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_config([base, mine])
    message = str(err.value)
    assert "experiments.e1.fixed.batchsize: unknown key (did you mean 'batch_size'?)" in message
    assert f"(from {mine})" in message and "variants" not in message
    assert "`mathrl settings` lists" in message and "adam_beta1" not in message  # a pointer, not 80 keys
    bad_grid = write_config(tmp_path / "grid.yaml", {"experiments": {"e1": {"grid": {"lr": [0.1, -1]}, "seeds": [0]}}})
    with pytest.raises(ConfigError, match=r"experiments\.e1\.grid\.lr: -1 .*grid\.yaml"):
        load_config([base, bad_grid])


@pytest.mark.parametrize("roles, needle", [
    ({"reference": "b"}, "experiments.e1.roles.reference: 'b' is not a variant of e1; allowed: a, c"),
    ({"baseline": "aa"}, "did you mean 'a'"),
])  # fmt: skip
def test_a_role_must_name_a_variant(tiny_cfg_dict, tmp_path, roles, needle):
    base = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    mine = write_config(tmp_path / "mine.yaml", {"experiments": {"e1": {
        "variants": {"a": {}, "c": {"lr": 0.01}}, "roles": roles, "seeds": [0]}}})  # fmt: skip
    with pytest.raises(ConfigError, match="roles") as err:
        load_config([base, mine])
    assert needle in str(err.value) and str(mine) in str(err.value)


def test_variant_seeds_add_seeds_to_one_variant(tiny_cfg_dict, tmp_path):
    base = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    e1 = {"variants": {"a": {}, "c": {"lr": 0.01}}, "seeds": [0, 1], "variant_seeds": {"c": [0, 1, 2]}}
    runs = expand_runs(load_config([base, write_config(tmp_path / "more.yaml", {"experiments": {"e1": e1}})]))
    assert sorted(r for r in runs if r.startswith("e1__")) == [
        "e1__a__s0",
        "e1__a__s1",
        "e1__c__s0",
        "e1__c__s1",
        "e1__c__s2",
    ]
    e1["variant_seeds"] = {"cc": [0, 1, 2]}
    with pytest.raises(ConfigError, match=r"variant_seeds\.cc: 'cc' is not a variant of e1 \(did you mean 'c'\?\)"):
        load_config([base, write_config(tmp_path / "typo.yaml", {"experiments": {"e1": e1}})])
    e1["variant_seeds"] = {"c": [1, 2]}
    with pytest.raises(ConfigError, match=r"variant_seeds\.c: lacks the experiment's seeds \[0\]"):
        load_config([base, write_config(tmp_path / "drop.yaml", {"experiments": {"e1": e1}})])


def test_a_reference_role_may_name_a_grid_point(tiny_cfg_dict, tmp_path):
    base = write_config(tmp_path / "c.yaml", tiny_cfg_dict)
    e1 = {"grid": {"batch_size": [8, 16]}, "roles": {"reference": "batch_size=16"}, "seeds": [0]}
    good = {"experiments": {"e1": e1}}
    load_config([base, write_config(tmp_path / "good.yaml", good)])
    good["experiments"]["e1"]["roles"]["reference"] = "batch_size=32"
    needle = "'batch_size=32' is not a grid point of e1; allowed: batch_size=8, batch_size=16 \\("
    with pytest.raises(ConfigError, match=needle):
        load_config([base, write_config(tmp_path / "bad.yaml", good)])


def test_the_tiny_example_is_a_whole_small_config_with_the_grpo_vs_rloo_experiment():
    """config/examples/tiny.yaml (README, "The first five minutes") passes the schema read as
    `mathrl --config` reads it (over config/config.yaml, which it replaces), writes under its
    own results directory, and expands into grpo_vs_rloo's ten runs: the same experiment, claim
    included, as config/examples/grpo_vs_rloo.yaml."""
    import yaml

    examples = DEFAULT_CONFIG.parent / "examples"
    cfg = load_config(layered([examples / "tiny.yaml"]))
    assert cfg["results"] == "results/tiny" and list(cfg["tasks"]) == ["add"] and list(cfg["sft"]) == ["add"]
    runs = trained_runs(cfg)
    assert sorted(runs) == [f"grpo_vs_rloo__{arm}__s{seed}" for arm in ("grpo", "rloo") for seed in range(5)]
    assert all(spec.settings.steps <= 30 and spec.settings.batch_size <= 256 for spec in runs.values())
    ours = yaml.safe_load((examples / "tiny.yaml").read_text())["experiments"]
    assert ours == yaml.safe_load((examples / "grpo_vs_rloo.yaml").read_text())["experiments"]
