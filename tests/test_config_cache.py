"""The configuration, validated and expanded once per configuration and code, for the training
command and for every Snakemake call (mathrl.pipeline.config.load_config_and_runs and completed)."""

from __future__ import annotations

import copy

import pytest

from mathrl.pipeline import config
from tests.conftest import TINY, write_config


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MATHRL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_cache_gives_back_what_loading_gives(tmp_path, cache, monkeypatch):
    path = write_config(tmp_path / "c.yaml", {**copy.deepcopy(TINY), "results": str(tmp_path / "r")})
    cfg, runs = config.load_config_and_runs([path], ["train.lr=1e-3"])
    expected = config.load_config([path], ["train.lr=1e-3"])
    assert cfg == expected and runs == config.expand_runs(expected)
    assert len(list(cache.glob("config-*.json"))) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("validated again")

    monkeypatch.setattr(config, "expand_runs", refuse)  # validating a config expands its runs
    again = config.load_config_and_runs([path], ["train.lr=1e-3"])  # read, not validated again
    assert again == (cfg, runs)
    with pytest.raises(AssertionError, match="validated again"):  # another override is another key
        config.load_config_and_runs([path], ["train.lr=2e-3"])


def test_an_edited_file_or_an_invalid_one_is_not_read_from_the_cache(tmp_path, cache):
    cfg = {**copy.deepcopy(TINY), "results": str(tmp_path / "r")}
    path = write_config(tmp_path / "c.yaml", cfg)
    config.load_config_and_runs([path])
    cfg["experiments"]["tiny"]["seeds"] = [0, 1, 2]
    write_config(path, cfg)
    _, runs = config.load_config_and_runs([path])
    assert len(runs) == 6
    cfg["train"]["batch_size"] = 15  # not a multiple of group_size 4
    write_config(path, cfg)
    with pytest.raises(config.ConfigError, match="batch_size"):
        config.load_config_and_runs([path])
    assert len(list(cache.glob("config-*.json"))) == 2  # only what passed every check


def test_off_switch_and_a_cache_directory_others_can_read(tmp_path, monkeypatch):
    monkeypatch.setenv("MATHRL_CACHE_DIR", "off")
    assert config.cache_dir() is None
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setenv("MATHRL_CACHE_DIR", str(shared))
    assert config.cache_dir() is None  # readable by others: not used
    path = write_config(tmp_path / "c.yaml", {**copy.deepcopy(TINY), "results": str(tmp_path / "r")})
    cfg, _ = config.load_config_and_runs([path])  # still loads, without a cache
    assert cfg == config.load_config([path]) and not list(shared.iterdir())


def test_every_command_reads_the_config_through_the_cache(tmp_path, cache, monkeypatch):
    """The pipeline's commands (problems, sft, bandit, aggregate, ...) load one config file each: only the first
    validates it."""
    import argparse

    from mathrl.pipeline.cli import _load

    path = write_config(tmp_path / "c.yaml", {**copy.deepcopy(TINY), "results": str(tmp_path / "r")})
    args = argparse.Namespace(config=[str(path)], set=["train.lr=1e-3"])
    first = _load(args)
    assert first == config.load_config(config.layered([path]), ["train.lr=1e-3"])

    def refuse(*args, **kwargs):
        raise AssertionError("validated again")

    monkeypatch.setattr(config, "expand_runs", refuse)
    assert _load(args) == first
