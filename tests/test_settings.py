"""RunSettings: the schema's train keys as typed, frozen fields, built once per run."""

from __future__ import annotations

import dataclasses
import types

import pytest

from mathrl.pipeline.config import ConfigError, expand_runs, load_config, load_schema
from mathrl.pipeline.settings import RunSettings

JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}


def test_fields_are_the_schema_train_keys_with_their_types():
    props = load_schema()["definitions"]["train"]["properties"]
    fields = {f.name: f.type for f in dataclasses.fields(RunSettings)}
    assert list(fields) == list(props)
    hints = {name: eval(annotation, {}, {}) for name, annotation in fields.items()}  # "float | None" -> a type  # noqa: S307
    for name, spec in props.items():
        kinds = spec["type"] if isinstance(spec["type"], list) else [spec["type"]]
        hint = hints[name]
        declared = set(hint.__args__) if isinstance(hint, types.UnionType) else {hint}
        assert declared == {JSON_TYPES[k] for k in kinds}, name


def test_the_schema_describes_each_key_in_its_field_help():
    """The help is written on the fields (settings.py); the schema's description of each train key is the same text."""
    props = load_schema()["definitions"]["train"]["properties"]
    for f in dataclasses.fields(RunSettings):
        assert f.metadata["help"] == RunSettings.help(f.name), f.name
        assert props[f.name]["description"] == f.metadata["help"], (
            f"train.{f.name}: the schema's description differs from RunSettings.{f.name}'s help (settings.py); "
            "make them the same text"
        )


def test_every_run_of_the_default_config_builds_and_round_trips():
    runs = expand_runs(load_config())
    for spec in runs.values():
        assert isinstance(spec.settings, RunSettings)  # typed when the runs are expanded
        s = RunSettings.from_dict(spec.settings.as_dict())
        assert s == spec.settings and list(s.as_dict()) == [f.name for f in dataclasses.fields(RunSettings)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.lr = 1.0


def test_a_missing_or_unknown_key_is_refused():
    settings = next(iter(expand_runs(load_config()).values())).settings.as_dict()
    with pytest.raises(ConfigError, match="missing lr; unknown none"):
        RunSettings.from_dict({k: v for k, v in settings.items() if k != "lr"})
    with pytest.raises(ConfigError, match="missing none; unknown lrr"):
        RunSettings.from_dict({**settings, "lrr": 1.0})


def test_durations_and_the_time_left_read_as_people_say_them():
    from mathrl.pipeline.console import duration, time_left

    assert [duration(s) for s in (4.4, 200, 3900)] == ["4 s", "3 min 20 s", "1 h 05 min"]
    assert time_left(10, 2.0, 2, 5.0) == "about 30 s to go (10 steps of 2.00 s and 2 evaluations of 5.0 s)"
    assert time_left(1, 2.0, 1, 5.0) == "about 7 s to go (1 step of 2.00 s and 1 evaluation of 5.0 s)"


# ---- `mathrl train --run RUN KEY=VALUE`: the run's RunSettings changed by dataclasses.replace (config.overridden)


@pytest.fixture(scope="module")
def default_runs():
    cfg = load_config()
    cfg["experiments"]["pinned"] = {"fixed": {"task": "add", "warmup": 3}, "seeds": [0]}  # a warm-up named by the run
    return cfg, expand_runs(cfg)


CHANGES = [
    ("lab04_gpt__normal__s0", {"lr": 1e-3}),
    ("lab04_gpt__aggressive__s0", {"lr": 1e-3, "lr_scale": 1.0}),  # the LR to train with, unscaled
    ("lab04_gpt__aggressive__s0", {"lr_scale": 5.0, "steps": 3}),  # lr_scale as it is
    ("lab04_gpt__normal__s0", {"seed": 7}),  # the warm-up follows the seed (7 mod 5)
    ("lab04_gpt__normal__s0", {"task": "mul", "seed": 3}),
    ("lab04_gpt__normal__s0", {"warmup": None}),  # null: the seed's
    ("lab04_gpt__normal__s0", {"warmup": 2}),
    ("lab04_gpt__normal__s0", {"init": "random"}),  # no warm-up
    ("lab04_gpt__random_init__s0", {"init": None}),
    ("pinned__base__s0", {"seed": 1}),  # the run's own warm-up stays
    ("lab04_gpt__normal__s0", {"algorithm": "rloo"}),  # no preset either way
    ("lab04_gpt__normal__s0", {"kl_coef": 0.1, "batch_size": 64, "clip_eps_high": None}),
]


@pytest.mark.parametrize(("run", "changes"), CHANGES)
def test_a_change_by_replace_is_what_resolving_the_changed_settings_gives(default_runs, run, changes):
    from mathrl.pipeline.config import overridden, run_settings

    cfg, runs = default_runs
    spec = runs[run]
    settings = overridden(cfg, spec, changes)
    assert isinstance(settings, RunSettings) and settings.as_dict() == run_settings(cfg, {**spec.explicit, **changes})
    assert all(getattr(settings, k) == v for k, v in changes.items() if k != "warmup" or v is not None)
    assert spec.settings == runs[run].settings  # the expanded run's settings are not touched


def test_the_warm_up_follows_a_changed_seed_unless_the_run_names_one(default_runs):
    from mathrl.pipeline.config import overridden

    cfg, runs = default_runs
    assert overridden(cfg, runs["lab04_gpt__normal__s0"], {"seed": 7}).warmup == 2
    assert overridden(cfg, runs["pinned__base__s0"], {"seed": 1}).warmup == 3
    assert overridden(cfg, runs["lab04_gpt__normal__s0"], {"init": "random"}).warmup is None


@pytest.mark.parametrize(
    ("run", "changes", "needles"),
    [
        ("lab04_gpt__normal__s0", {"algorithm": "dapo"}, ["run.algorithm: dapo", "algorithms.dapo", "ad hoc run"]),
        ("lab04_gpt__normal__s0", {"algorithm": "ppo"}, ["run.algorithm: ppo", "algorithms.ppo", "variant"]),
        ("lab04_gpt__normal__s0", {"lr_scale": 2.0}, ["run.lr_scale", "applied already", "lr=VALUE"]),
        ("lab04_gpt__aggressive__s0", {"lr_scale": 1.0}, ["run.lr_scale", "lr=VALUE lr_scale=1.0"]),
        ("lab04_gpt__aggressive__s0", {"lr": 1e-3}, ["run.lr:", "lr_scale 5", "lr=0.001 lr_scale=1.0"]),
        ("lab04_gpt__normal__s0", {"lr": 1e-3, "lr_scale": 2.0}, ["sets both lr (0.001) and lr_scale (2.0)"]),
        ("lab04_gpt__normal__s0", {"lrr": 1e-3}, ["run.lrr: unknown key", "did you mean 'lr'"]),
        ("lab04_gpt__normal__s0", {"lr": "fast"}, ["run.lr: 'fast' is not of type 'number'"]),
    ],
)
def test_a_change_whose_meaning_depends_on_the_resolution_is_refused_naming_it(default_runs, run, changes, needles):
    from mathrl.pipeline.config import overridden

    cfg, runs = default_runs
    with pytest.raises(ConfigError) as exc:
        overridden(cfg, runs[run], changes)
    for needle in needles:
        assert needle in str(exc.value), (needle, str(exc.value))


def test_train_resolves_a_run_or_an_ad_hoc_run_into_typed_settings(default_runs):
    from mathrl.pipeline.cli import resolve_run
    from mathrl.pipeline.config import run_settings

    cfg, runs = default_runs
    run_id, experiment, settings = resolve_run(cfg, "lab04_gpt__normal__s0", None, ["log_every=7"], runs)
    assert (run_id, experiment) == ("lab04_gpt__normal__s0", "lab04_gpt")
    assert settings == dataclasses.replace(runs["lab04_gpt__normal__s0"].settings, log_every=7)
    run_id, experiment, settings = resolve_run(cfg, None, "mine", ["lr=1e-3", "seed=2"], runs)
    assert (run_id, experiment) == ("mine", None)
    assert settings == RunSettings.from_dict(run_settings(cfg, {"lr": 1e-3, "seed": 2}))
    with pytest.raises(ConfigError, match="run.lrr: unknown key"):
        resolve_run(cfg, None, "mine", ["lrr=1e-3"], runs)
