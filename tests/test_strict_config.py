"""Configurations read strictly: a key given twice (in a --config file, Snakemake's --configfile, --set and a run's
KEY=VALUE), every name a claim uses (its table, measure, arm columns, variant, role) and a key misplaced in a claim,
each refused in one message when the config is read, by every command that reads it."""

from __future__ import annotations

import copy
import dataclasses

import pandas as pd
import pytest

from mathrl.analysis import claim_names
from mathrl.pipeline.cli import main
from mathrl.pipeline.config import ConfigError, claim_declarations, load_config, parse_overrides, safe_load
from tests.conftest import TINY, snakemake, tiny_config, write_config

DUPLICATES = {
    # two experiments: blocks (the first experiment and its claim would vanish), two train: blocks, a key twice
    "experiments": ("experiments:\n  a: {seeds: [0]}\ntrain: {steps: 3}\nexperiments:\n  b: {seeds: [0]}\n", 1, 4),
    "train": ("train:\n  steps: 3\ntasks: {add: {op: add}}\ntrain:\n  lr: 1.0e-3\n", 1, 4),
    "steps": ("train:\n  steps: 3\n  lr: 1.0e-3\n  steps: 7\n", 2, 4),
}


@pytest.mark.parametrize("key", DUPLICATES)
def test_a_key_given_twice_in_a_config_file_is_refused_with_both_lines(tmp_path, capsys, key):
    text, first, second = DUPLICATES[key]
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    assert main(["runs", "--config", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"mathrl runs: error: config file {path}: key {key!r} is given twice in one mapping (lines {first} and "
        f"{second}); YAML would keep the second in silence: give it once"
    )


def test_a_merge_key_is_no_duplicate():
    text = "base: &b {steps: 3, lr: 1}\nrun:\n  <<: *b\n  steps: 7\n"
    assert safe_load(text)["run"] == {"steps": 7, "lr": 1}


@pytest.mark.parametrize(
    "items, needle",
    [
        (["train.steps=3", "train.steps=7"], "overrides 'train.steps=3' and 'train.steps=7': both set it"),
        (
            ["train.lr=1e-3", "train={steps: 3}"],
            "overrides 'train.lr=1e-3' and 'train={steps: 3}': the second replaces train, and with it the first",
        ),
        (["train={steps: 3, steps: 7}"], "override 'train={steps: 3, steps: 7}': key 'steps' is given twice"),
    ],
    ids=["same key", "replaced mapping", "inside a value"],
)
def test_a_key_given_twice_by_set_is_refused(capsys, items, needle):
    argv = [word for item in items for word in ("--set", item)]
    assert main(["runs", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_a_run_setting_given_twice_is_refused(capsys):
    assert main(["train", "--dry-run", "steps=3", "lr=1e-3", "steps=7"]) == 2
    assert "overrides 'steps=3' and 'steps=7': both set it" in capsys.readouterr().err


def test_a_deeper_key_after_its_mapping_is_kept():
    """`train={steps: 3}` then `train.lr=1e-3` sets both: nothing is dropped."""
    assert parse_overrides(["train={steps: 3}", "train.lr=1e-3"]) == [
        (["train"], {"steps": 3}),
        (["train", "lr"], 1e-3),
    ]


def test_snakemakes_configfile_with_a_key_given_twice_is_refused(tmp_path):
    tiny = tiny_config(tmp_path)
    text, first, second = DUPLICATES["experiments"]
    (tmp_path / "mine.yaml").write_text(text)
    res = snakemake(tmp_path, "-n", "--configfile", str(tiny), "mine.yaml")
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"key 'experiments' is given twice in one mapping (lines {first} and {second})" in out, out
    assert "rule " not in out and not (tmp_path / "results").exists()


# --- the names a claim uses ------------------------------------------------------------------------------------------

CLAIM = {
    "id": "mine",
    "statement": "RLOO ends more accurate than GRPO",
    "measure": "final_eval",
    "a": {"role": "candidate"},
    "b": {"role": "baseline"},
}
MISSPELT = {
    "measure": (
        {"measure": "final_evl"},
        "measure: 'final_evl' is not a column of table run_measures (did you mean 'final_eval'?)",
    ),
    "variant": (
        {"a": {"variant": "rlo"}},
        "a.variant: 'rlo' is not a variant of experiment mine (did you mean 'rloo'?); allowed: grpo, rloo",
    ),
    "role": (
        {"b": {"role": "baselin"}},
        "b.role: 'baselin' is not a role of experiment mine (did you mean 'baseline'?); allowed: baseline, candidate",
    ),
    "table": (
        {"table": "run_measure"},
        "table: 'run_measure' is not a table claims read (did you mean 'run_measures'?)",
    ),
    "arm column": (
        {"a": {"variant": "rloo", "sed": 0}},
        "a.sed: 'sed' is not a column of table run_measures (did you mean 'seed'?)",
    ),
}


def experiment(claim: dict) -> dict:
    return {
        "mine": {
            "variants": {"grpo": {"algorithm": "grpo"}, "rloo": {"algorithm": "rloo"}},
            "seeds": [0],
            "roles": {"baseline": "grpo", "candidate": "rloo"},
            "claims": [claim],
        }
    }


@pytest.mark.parametrize("name", MISSPELT)
def test_a_misspelt_name_in_a_claim_is_refused_by_mathrl_runs(tmp_path, capsys, name):
    change, needle = MISSPELT[name]
    cfg = {**copy.deepcopy(TINY), "results": str(tmp_path / "results"), "experiments": experiment({**CLAIM, **change})}
    path = write_config(tmp_path / "mine.yaml", cfg)
    assert main(["runs", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mathrl runs: error: experiments.mine.claims[0] (mine): ") and needle in err, err
    assert len(err.splitlines()) == 1
    assert (
        main(["runs", "--config", str(write_config(tmp_path / "ok.yaml", {**cfg, "experiments": experiment(CLAIM)}))])
        == 0
    )


@pytest.mark.parametrize("name", ["measure", "variant", "role"])
def test_a_misspelt_name_in_a_claim_is_refused_by_snakemake_before_any_job(tmp_path, name):
    change, needle = MISSPELT[name]
    tiny = tiny_config(tmp_path, experiment({**CLAIM, **change}))
    res = snakemake(tmp_path, "-n", "--configfile", str(tiny))
    out = res.stdout + res.stderr
    assert res.returncode != 0 and needle in out, out
    assert "rule " not in out and not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"direction": -1}, "claims.0.direction: unknown key; it belongs under expect (expect: {direction: ...})"),
        (
            {"expect": {"size": [0, 1], "measure": "gain"}},
            "claims.0.expect.measure: unknown key; it belongs one level up, beside expect (not under it)",
        ),
        (
            {"checks": [{"type": "engaged", "label": "x", "measure": "gain", "at_least": 0, "direction": 1}]},
            "claims.0.checks.0.direction: unknown key; allowed keys: arm, at_least, at_most, label, measure,",
        ),
    ],
    ids=["down", "up", "neither"],
)
def test_a_key_misplaced_in_a_claim_is_told_where_it_belongs(tmp_path, change, needle):
    cfg = {**copy.deepcopy(TINY), "results": str(tmp_path / "results"), "experiments": experiment({**CLAIM, **change})}
    with pytest.raises(ConfigError) as e:
        load_config([write_config(tmp_path / "mine.yaml", cfg)])
    assert needle in str(e.value), str(e.value)


def test_a_config_key_misplaced_at_the_top_is_told_where_it_belongs(tmp_path):
    cfg = {**copy.deepcopy(TINY), "results": str(tmp_path / "results"), "steps": 3}
    with pytest.raises(ConfigError, match=r"steps: unknown key; it belongs under train \(train: \{steps: ...\}\)"):
        load_config([write_config(tmp_path / "mine.yaml", cfg)])


def test_the_claims_files_names_are_checked_too(tmp_path):
    """A claim of config/claims.yaml's kind naming a column its table lacks is refused with the table's columns; the
    project's own claims file passes with the default config (load_config checks it)."""
    path = tmp_path / "claims.yaml"
    path.write_text(
        "claims:\n  - {id: c, kind: document, statement: s, table: lab04_entropy, measure: final_policy_entrpy,\n"
        "     a: {setting: aggressive}}\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"claims\[0\] \(c\): measure: 'final_policy_entrpy' is not a column of table "
        r"lab04_entropy \(did you mean 'final_policy_entropy'\?\); its columns: setting, ",
    ):
        claim_names.check(load_config(), claim_declarations(load_config(), path))


def test_the_claims_files_variants_and_roles_are_the_default_configs():
    """A document claim whose study lacks a role is "not judged" rather than refused (a configuration may leave a
    study's roles out), so the project's own claims file is held to the default config here, as a user's claims are
    when the config is read."""
    cfg = load_config()
    tables, checked = claim_names.table_columns(cfg), 0
    for decl, where in claim_declarations(cfg):
        for d in claim_names.expand(decl, cfg):
            if d.get("experiment") in cfg["experiments"]:
                claim_names.check_names({**d, "kind": "user"}, where, tables, cfg)
                checked += 1
    assert checked > 50


# --- the tables' declared columns ---------------------------------------------------------------------------------


def test_each_tables_columns_read_from_the_source_are_the_modules_own():
    """The declarations read without importing (claim_names) are the imported modules' CLAIM_TABLES, RUN_TABLES
    (a run table's columns: its keys, then its measures) and BANDIT_TABLES (setting, seed, the measures, n, the
    spreads, the measures among the rows), run_measures' {measures} are the measures registered with every_run, and
    every name the source registers is the registry's."""
    import importlib

    from mathrl.analysis.measures import AMONG, EVERY_RUN, MEASURES, SEED_MEASURES

    imported = {}
    for path in claim_names.TABLE_MODULES:
        parts = path.relative_to(claim_names.PACKAGE.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        imported.update({t: tuple(c) for t, c in getattr(module, "CLAIM_TABLES", {}).items()})
        imported.update({t: (*d["keys"], *d["measures"]) for t, d in getattr(module, "RUN_TABLES", {}).items()})
        for t, d in getattr(module, "BANDIT_TABLES", {}).items():
            imported[t] = ("setting", "seed", *d["measures"], "n", *(f"{m}_std" for m in d["spread"]), *d["among"])
    assert claim_names.declared_tables() == imported and {"stability_batch_runs", "lab04_hacking"} <= set(imported)
    assert claim_names.measure_names() == tuple(EVERY_RUN)
    assert sorted(claim_names.measure_names(every_run=False)) == sorted([*MEASURES, *AMONG, *SEED_MEASURES])
    columns = claim_names.table_columns({"experiments": {"e": {"grid": {"batch_size": [1], "lr": [1]}}}})
    grid = columns["run_measures"][5:7]  # after the run's identity and warm-up
    assert grid == ["batch_size", "lr"] and columns["run_measures"][-len(EVERY_RUN) :] == list(EVERY_RUN)


def test_a_run_table_names_registered_measures_and_keys_only():
    """Each measure a run table lists is registered; each key is a run's identity or one of its settings; a bandit table
    lists measures of a bandit seed, then measures among its rows."""
    from mathrl.analysis.measures import AMONG, BANDIT_TABLES, MEASURES, RUN_TABLES, SEED_MEASURES
    from mathrl.analysis.measures.tables import IDENTITY
    from mathrl.pipeline.settings import RunSettings

    settings = {f.name for f in dataclasses.fields(RunSettings)}
    for name, decl in RUN_TABLES.items():
        assert set(decl["measures"]) <= set(MEASURES) | set(AMONG), name
        assert set(decl["keys"]) <= set(IDENTITY) | settings, name
    for name, decl in BANDIT_TABLES.items():  # a bandit table: measures of a bandit seed, then of its rows
        assert set(decl["measures"]) <= set(SEED_MEASURES) and set(decl["among"]) <= set(AMONG), name
        assert set(decl["spread"]) <= set(decl["measures"]), name


def test_a_constant_is_read_from_source_with_the_names_it_uses(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        'import os\nA = ["x", "y"]\nB = "p q".split()\nC = {"t": [*A, *(f"{b}_std" for b in B)], '
        '"u": A + ["z"]}\n\ndef f():\n    return os\n'
    )
    assert claim_names.module_constant(source, "C") == {"t": ["x", "y", "p_std", "q_std"], "u": ["x", "y", "z"]}
    (tmp_path / "bad.py").write_text("import os\nD = os.getcwd()\n")
    with pytest.raises(NameError, match="D is not a constant this reader can evaluate"):
        claim_names.module_constant(tmp_path / "bad.py", "D")


def test_a_table_is_held_to_its_declaration():
    cfg = {"experiments": {}}
    made = pd.DataFrame({"setting": ["a"], "seed": [0], "initial_entropy": [1.0]})
    shaped = claim_names.conform("lab04_entropy", made, cfg)
    assert list(shaped.columns[:3]) == ["setting", "seed", "initial_entropy"]
    assert set(shaped.columns) == set(claim_names.table_columns(cfg)["lab04_entropy"])  # the rest added, empty
    assert list(claim_names.conform("lab04_entropy", pd.DataFrame(), cfg).columns) == list(
        claim_names.table_columns(cfg)["lab04_entropy"]
    )
    with pytest.raises(ValueError, match=r"table lab04_entropy: columns \['entropy_at_3'\] are not in its"):
        claim_names.conform("lab04_entropy", made.assign(entropy_at_3=1.0), cfg)


def test_the_measures_listing_says_where_claims_read_each_measure():
    """`mathrl claims --measures`: each registered measure once, with its meaning and every table that lists it (a
    measure of a bandit seed, or of a row among a bandit table's rows, names its bandit table)."""
    from mathrl.analysis.measures import AMONG, BANDIT_TABLES, EVERY_RUN, MEASURES, RUN_TABLES, SEED_MEASURES
    from mathrl.analysis.measures.catalog import listing

    lines = listing({**RUN_TABLES, **BANDIT_TABLES}).splitlines()
    names = [line.split(":")[0] for line in lines[::2]]
    assert sorted(names) == sorted([*MEASURES, *AMONG, *SEED_MEASURES]) and names == sorted(names)
    where = {name: line.removeprefix("    in: ") for name, line in zip(names, lines[1::2])}
    assert all("run_measures" in where[name] for name in EVERY_RUN)
    for table, decl in {**RUN_TABLES, **BANDIT_TABLES}.items():
        assert all(table in where[name].split(", ") for name in [*decl["measures"], *decl.get("among", ())]), table
    assert where["final_eval_absdev"] == "stability_fvd_runs"
    assert where["final_policy_entropy"] == "lab04_entropy" and where["severity"] == "lab04_vanishing"
