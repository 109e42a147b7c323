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
        assert RunSettings.help(name) == spec["description"]
    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(RunSettings)}
    assert helps == {name: spec["description"] for name, spec in props.items()}  # each field carries its help


def test_every_run_of_the_default_config_builds_and_round_trips():
    runs = expand_runs(load_config())
    for spec in runs.values():
        s = RunSettings.from_dict(spec.settings)
        assert s.as_dict() == spec.settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.lr = 1.0


def test_a_missing_or_unknown_key_is_refused():
    settings = next(iter(expand_runs(load_config()).values())).settings
    with pytest.raises(ConfigError, match="missing lr; unknown none"):
        RunSettings.from_dict({k: v for k, v in settings.items() if k != "lr"})
    with pytest.raises(ConfigError, match="missing none; unknown lrr"):
        RunSettings.from_dict({**settings, "lrr": 1.0})


def test_durations_and_the_time_left_read_as_people_say_them():
    from mathrl.pipeline.console import duration, time_left

    assert [duration(s) for s in (4.4, 200, 3900)] == ["4 s", "3 min 20 s", "1 h 05 min"]
    assert time_left(10, 2.0, 2, 5.0) == "about 30 s to go (10 steps of 2.00 s and 2 evaluations of 5.0 s)"
    assert time_left(1, 2.0, 1, 5.0) == "about 7 s to go (1 step of 2.00 s and 1 evaluation of 5.0 s)"
