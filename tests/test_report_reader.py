"""The parts of the report a reader of the documents reads first: the headline findings (report/headlines.yaml), the
coverage table (coverage.csv joined to claims.csv), the limitations and the list of data files beside the page.

The fixtures are small synthetic claims.csv and coverage.csv frames with the columns the claims engine writes,
including those a newer engine adds (quote, translation, status, line, warmups, between_share); an older claims.csv
without them must still give a page.
"""

from __future__ import annotations

import io
import math
import re

import pandas as pd
import pytest
import yaml
from markupsafe import Markup

from mathrl.analysis import coverage_view as coverage
from mathrl.analysis import datafiles, headlines, limitations
from mathrl.analysis.aggregate import warmup_spread
from mathrl.analysis.report import environment
from mathrl.pipeline.errors import ConfigError
from tests.test_report import Dom

LAB04 = "lab04-training-challenges.md"
BATCH = "rl-stability-batch-and-hyperparameters.md"
CLAIMS = pd.read_csv(
    io.StringIO(
        "claim_id,kind,source,statement,outcome,difference,ci_low,ci_high,n,n_a,n_b,unit,design,reason,quote,"
        "translation,status,line,warmups,between_share\n"
        f'collapse,document,"{LAB04}, 熵坍塌",entropy falls,agrees,-0.5,-0.7,-0.3,5,5,5,num,paired,,熵会下降,'
        "entropy falls,tested,primary,1,\n"
        f'remedy,document,"{LAB04}, 熵坍塌",the remedy keeps entropy,not judged,,,,5,5,5,num,paired,'
        "failure not established: collapse (aggressive) not established: x 0.1 (needs >= 0.5),"
        "补救有效,the remedy works,tested,secondary,3,0.42\n"
        f'batch,document,"{BATCH}, 2.1",large batch is more accurate,inconclusive,0.031,-0.01,0.072,5,5,5,pts,'
        "paired,,大批次更准确,the large batch is more accurate,tested at the documents' scale only,primary,1,\n"
        f'orphan,document,"{BATCH}, 八 (troubleshooting)",a claim no coverage row names,disagrees,0.2,0.1,0.3,5,5,5,'
        "pts,paired,,,,tested,primary,,\n"
        'setup_x,setup,"lab04-training-challenges.md, 熵坍塌",the setting is reproduced,agrees,0.01,0.0,0.02,5,5,5,'
        "num,paired,,,,,,,\n"
    )
)
COVERAGE = pd.read_csv(
    io.StringIO(
        "document,section,row_id,claim_ids,quote,translation,document_setting,testbed,fails_if,minimal_effect,"
        "status,why\n"
        f"{LAB04},熵坍塌,lab04-1,collapse; remedy,熵会迅速下降,entropy falls fast,lr 5e-3,lr x5,no fall,0.1,tested,\n"
        f"{LAB04},成功标准,lab04-2,,收敛到全局最优,converges to the global optimum,,,,,"
        "not testable at this scale,the document gives no number of seeds\n"
        f"{BATCH},2.1,batch-1,batch;missing_claim,大批次更稳定,the large batch is steadier,,,,,tested,\n"
    )
)


class FakeTables(dict):
    """Tables by name, an empty frame for one that was not written (as mathrl.analysis.study_inputs.Tables)."""

    def __missing__(self, name):
        return pd.DataFrame()


# ---------------------------------------------------------------------------------------- headlines
def write_headlines(tmp_path, items) -> list[dict]:
    path = tmp_path / "headlines.yaml"
    path.write_text(yaml.safe_dump({"headlines": items}, allow_unicode=True))
    return headlines.load(path)


def test_a_headline_reads_its_numbers_from_the_claims_and_tables(tmp_path):
    table = pd.DataFrame({"role": ["baseline", "other"], "gain_mean": [-0.2, 0.1], "gain_std": [0.1, 0.1], "n": [4, 4]})
    declared = write_headlines(
        tmp_path,
        [
            {
                "id": "one",
                "section": "lab04",
                "claims": {"c": "collapse"},
                "text": "Entropy moves by {{ c }} ({{ c.link }}).",
            },
            {
                "id": "two",
                "section": "stability",
                "cells": {
                    "fall": {
                        "table": "t",
                        "where": {"role": "baseline"},
                        "value": "gain_mean",
                        "std": "gain_std",
                        "unit": "pts",
                    }
                },
                "groups": {"g": ["collapse", "remedy", "batch"]},
                "text": "The fall is {{ fall }}; {{ g.count('agrees') }} of {{ g.total }} agree.",
            },
        ],
    )
    shown, skipped, warnings = headlines.fill(declared, CLAIMS, FakeTables(t=table))
    assert warnings == [] and skipped == []
    one, two = (str(h["text"]) for h in shown)
    assert one == 'Entropy moves by -0.50 (95% CI [-0.70, -0.30], n=5) (<a href="#claim-collapse">agrees</a>).'
    # -0.2 ± t(3) 0.1 / 2 = -0.2 ± 0.159: by hand
    assert two == "The fall is -20.0 pts (95% CI [-35.9 pts, -4.1 pts], n=4); 1 of 3 agree."


def test_a_headline_this_run_cannot_fill_is_left_out_and_a_stale_one_warned_of(tmp_path):
    """Not in this run (a claim its config does not judge, a claim not judged, no documents'-scale tree): left out,
    the page says why. Named in report/headlines.yaml but declared nowhere, or under a section the page lacks: left
    out with a warning, since the file is out of date."""
    declared = write_headlines(tmp_path, [
        {"id": "gone", "section": "lab04", "claims": {"c": "renamed_claim"}, "text": "It is {{ c }}."},
        {"id": "absent", "section": "lab04", "claims": {"c": "equal_samples_32"}, "text": "It is {{ c }}."},
        {"id": "unjudged", "section": "lab04", "claims": {"c": "remedy"}, "text": "It is {{ c }}."},
        {"id": "scale", "section": "coverage", "scale": True, "text": "{{ scale.differ }} of {{ scale.compared }}."},
        {"id": "misplaced", "section": "nowhere", "claims": {"c": "batch"}, "text": "Batch: {{ c.value }}."},
        {"id": "kept", "section": "lab04", "claims": {"c": "batch"}, "text": "Batch: {{ c.value }}."},
    ])  # fmt: skip
    patterns = [re.compile(p) for p in ("collapse", "remedy", "batch", "orphan", "equal_samples_.+")]
    anchors = {"lab04", "coverage"}
    shown, skipped, warnings = headlines.fill(declared, CLAIMS, FakeTables(), None, patterns, anchors)
    assert [h["id"] for h in shown] == ["kept"] and str(shown[0]["text"]) == "Batch: +3.1 pts."
    why = {h["id"]: h["why"] for h in skipped}
    assert why == {
        "gone": "claim renamed_claim is declared nowhere (config/claims.yaml or an experiment's claims)",
        "absent": "claim equal_samples_32 is not in this run's claims.csv",
        "unjudged": "claim remedy was not judged",
        "scale": "no documents'-scale tree was given (mathrl report --full-results DIR)",
        "misplaced": "section nowhere is not a section of the page",
    }
    assert [w.split(": headline ")[1].split(" ")[0] for w in warnings] == ["gone", "misplaced"]
    assert all(w.startswith("report/headlines.yaml: headline") for w in warnings)
    full = CLAIMS.assign(outcome=["agrees", "not judged", "agrees", "agrees", "agrees"])
    shown, skipped, warnings = headlines.fill(declared[3:4], CLAIMS, FakeTables(), full, patterns, anchors)
    assert warnings == [] == skipped and str(shown[0]["text"]) == "2 of 4."  # batch and orphan change


def test_the_declared_claim_ids_match_a_foreach_declaration_s_expansions():
    from mathrl.pipeline.config import DEFAULT_CONFIG, load_config

    patterns = headlines.declared_ids(load_config(DEFAULT_CONFIG))
    known = ("batch_more_accurate", "equal_samples_64", "add_start_30_rl_vs_supervised")
    assert all(any(p.fullmatch(i) for p in patterns) for i in known)
    assert not any(p.fullmatch("no_such_claim") for p in patterns)


@pytest.mark.parametrize(
    "item, words",
    [
        ({"id": "x", "section": "s", "text": "31 points in favour of {{ c }}"}, "a digit in its text"),
        ({"id": "x", "section": "s", "text": "t", "claim": "c"}, "unknown key"),
        ({"id": "x", "text": "t"}, "needs `id`, `section` and `text`"),
        ({"id": "x", "section": "s", "text": "t", "cells": {"a": {"table": "t"}}}, "cell a needs `table` and `value`"),
    ],
)
def test_a_headline_with_a_typed_in_number_or_a_bad_key_is_refused(tmp_path, item, words):
    with pytest.raises(ConfigError, match=words):
        write_headlines(tmp_path, [item])


def test_the_shipped_headlines_are_valid_and_hold_no_number():
    declared = headlines.load()
    assert 4 <= len(declared) <= 6
    assert all(h["section"] for h in declared)


# ---------------------------------------------------------------------------------------- coverage
def test_every_document_claim_appears_in_the_coverage_table_with_its_sentence():
    docs = coverage.table(COVERAGE, CLAIMS)
    assert [d["document"] for d in docs] == [LAB04, BATCH]  # by file name
    rows = {r["row_id"]: r for d in docs for s in d["sections"] for r in s["rows"]}
    claims = {c["claim_id"]: r for r in rows.values() for c in r["claims"]}
    assert set(CLAIMS.loc[CLAIMS["kind"] == "document", "claim_id"]) <= set(claims)
    assert claims["collapse"]["quote"] == "熵会迅速下降" and claims["remedy"] is claims["collapse"]
    assert claims["orphan"]["translation"] == "a claim no coverage row names"  # under its source, in our words
    assert "setup_x" not in claims  # a setup check is not a claim of the document
    batch = {c["claim_id"]: c for c in rows["batch-1"]["claims"]}
    assert batch["missing_claim"]["outcome"] == "missing" and batch["batch"]["value"] == "+3.1 pts"
    assert rows["lab04-2"]["claims"] == [] and rows["lab04-2"]["caveats"] == [
        "not testable at this scale: the document gives no number of seeds"
    ]
    assert rows["lab04-1"]["caveats"] == [
        "depends on one warm-up",
        "secondary design (adjusted from the document's; not counted in its family)",
        "rests on 3 warm-ups, 42% of its variance between them",
    ]
    assert rows["batch-1"]["caveats"] == ["tested at the documents' scale only", "depends on one warm-up"]
    lab04 = docs[0]["sections"]
    assert [s["section"] for s in lab04] == ["熵坍塌", "成功标准"]  # the documents' order
    assert [s["section"] for s in docs[1]["sections"]] == ["2.1", "八 (troubleshooting)"]


def test_the_documents_scale_is_set_beside_each_claim_and_a_change_marked():
    full = CLAIMS.assign(outcome=["agrees", "agrees", "agrees", "disagrees", "agrees"])
    docs = coverage.table(COVERAGE, CLAIMS, full)
    cells = {c["claim_id"]: c for d in docs for s in d["sections"] for r in s["rows"] for c in r["claims"]}
    assert (cells["collapse"]["full"], cells["collapse"]["differs"]) == ("agrees", False)
    assert (cells["remedy"]["full"], cells["remedy"]["differs"]) == ("agrees", True)
    assert cells["missing_claim"]["full"] is None and coverage.counts(docs)["differ"] == 2
    assert all(c["full"] is None for c in coverage.table(COVERAGE, CLAIMS)[0]["sections"][0]["rows"][0]["claims"])


def test_without_coverage_csv_or_the_new_columns_the_table_is_built_from_claims_csv():
    old = CLAIMS.drop(columns=["quote", "translation", "status", "line", "warmups", "between_share"])
    docs = coverage.table(pd.DataFrame(), old)
    rows = [r for d in docs for s in d["sections"] for r in s["rows"]]
    assert sorted(c["claim_id"] for r in rows for c in r["claims"]) == ["batch", "collapse", "orphan", "remedy"]
    assert all(r["quote"] == "" and r["translation"] and r["caveats"] == [] for r in rows)


def test_the_coverage_template_shows_each_claim_once_with_its_sentence():
    env = environment()
    docs = coverage.table(COVERAGE, CLAIMS, CLAIMS.assign(outcome="agrees"))
    html = env.get_template("coverage.html.j2").render(
        coverage=docs, coverage_counts=coverage.counts(docs), coverage_table=True, full_given=True, tables_href="t"
    )
    dom = Dom(html)
    assert dom.errors == []
    for claim_id in ("collapse", "remedy", "batch", "orphan"):
        li = dom.root.find("li", id=f"cov-{claim_id}")
        assert li is not None and li.find("a").attrs["href"] == f"#claim-{claim_id}"
    text = dom.root.text()
    assert "熵会迅速下降" in text and "entropy falls fast" in text and "documents' scale" in text
    assert [li.text() for li in dom.root.iter("li") if "differs" in li.attrs.get("class", "")] == ["agrees"] * 3


# ---------------------------------------------------------------------------------------- limitations
def limits_text(cfg, claims=CLAIMS, plan=None, sft=None, configs=None) -> str:
    sft = sft if sft is not None else pd.DataFrame({"task": ["add", "mul"]})
    t = FakeTables(
        sft=sft,
        sft_spread=warmup_spread(sft) if "steps" in sft else pd.DataFrame(),
        system_configs=configs if configs is not None else pd.DataFrame(),
    )
    docs = coverage.table(COVERAGE, claims)
    facts = limitations.facts(
        cfg, t, claims, docs, plan=plan, machines=[{"cpu": "EPYC", "cpu_kernels": "AVX2", "runs": 3}]
    )
    html = environment().get_template("limitations.html.j2").render(limits=facts)
    return Dom(html).root.text()


CFG = {"experiments": {"batch": {"seeds": [0, 1, 2, 3, 4]}, "system": {"seeds": [0, 1, 2]}}}


def test_the_seed_plan_sentence_follows_the_plan_and_the_config(tmp_path):
    plan = tmp_path / "seed_plan.yaml"
    text = limits_text(CFG, plan=plan)
    assert "not fixed by a plan before the runs" in text and "3 to 5 per setting" in text
    plan.write_text(
        yaml.safe_dump(
            {
                "pilot": {"commit": "abc1234", "date": "2026-11-20"},
                "method": "power at the pilot's\nspread",
                "experiments": {"batch": 5, "system": {"seeds": [0, 1, 2, 3]}},
            }
        )
    )
    text = limits_text(CFG, plan=plan)
    assert "fixed on 2026-11-20 from a pilot at commit abc1234" in text and "power at the pilot's spread" in text
    assert "in 1 experiment: system (3 seeds, 4 planned)" in text
    cfg = {"experiments": {**CFG["experiments"], "system": {"seeds": [0, 1, 2, 3]}}}  # the config now runs the plan
    assert "Every experiment the plan names runs the seeds it planned" in limits_text(cfg, plan=plan)
    plan.write_text(yaml.safe_dump({"pilot": {"date": "2026-11-20"}, "experiments": {}}))
    with pytest.raises(ConfigError, match="missing key"):
        limits_text(CFG, plan=plan)


def test_the_warm_up_sentence_reads_claims_csv_or_else_the_warm_ups_trained(tmp_path):
    plan = tmp_path / "none.yaml"
    text = limits_text(CFG, plan=plan)
    assert "of the 3 document claims judged, 2 rest on 1 independent warm-up, 1 on none (the bandit's" in text.lower()
    assert "42% (remedy)" not in text  # remedy is not judged: not among the claims counted
    older = CLAIMS.drop(columns=["warmups", "between_share"])
    text = limits_text(CFG, claims=older, plan=plan)
    assert (
        "does not record how many warm-ups" in text
        and "1 warm-up checkpoint for add, 1 warm-up checkpoint for mul" in text
    )
    text = limits_text(CFG, claims=older, plan=plan, sft=pd.DataFrame({"task": ["add", "add", "mul"]}))
    assert "2 warm-up checkpoints for add" in text


def test_the_warm_ups_spread_is_stated_per_task(tmp_path):
    """How far apart a task's warm-ups start RL, lowest to highest, from the warm-ups' own summaries."""
    sft = pd.DataFrame(
        {
            "task": ["add", "add", "add", "mul", "add1"],
            "val_accuracy": [0.30, 0.32, 0.31, 0.4, math.nan],  # add1 has no validation split
            "eval_accuracy": [0.281, 0.334, 0.30, 0.39, 0.2],
            "steps": [400, 450, 425, 900, 500],
        }
    )
    text = " ".join(limits_text(CFG, plan=tmp_path / "none.yaml", sft=sft).split())
    assert (
        "add's 3 at validation accuracy 30.0% to 32.0% and test accuracy 28.1% to 33.4%, after 400 to 450 steps" in text
    )
    assert "mul's 1 at validation accuracy 40.0% to 40.0%" in text and "add1's 1 at test accuracy 20.0%" in text
    assert "start RL at different points" not in limits_text(CFG, plan=tmp_path / "none.yaml")


def test_the_design_sentence_lists_the_settings_that_differ_from_the_document(tmp_path):
    configs = pd.DataFrame(
        {
            "task": ["add"] * 3,
            "config": ["AdderRLConfig"] * 3,
            "key": ["batch_size", "lr", "micro_batch_size"],
            "setting": ["sequences per step", "learning rate", "micro"],
            "ours": [512.0, 1e-4, 512.0],
            "document": [128.0, 1e-4, 64.0],
        }
    )
    text = limits_text(CFG, plan=tmp_path / "none.yaml", configs=configs)
    assert "in 1 setting: add sequences per step 512 (the document's AdderRLConfig: 128)" in text
    assert "1 claim is judged on an adjusted, secondary design" in text and "remedy" in text
    assert "EPYC with torch's AVX2 kernels (3 runs)" in text and "python -m bench.replicate" in text
    assert "2 rows of the documents cannot be tested at this scale or only at the documents'" in text
    assert (
        "1 of the 4 document claims are not judged, by the first words of their reasons: failure not established (1)"
        in text
    )


# ---------------------------------------------------------------------------------------- data files
def test_a_column_is_described_by_its_declaration_a_statistic_or_a_measure():
    decl = {"columns": {"gain": "held-out gain"}, "measures": True, "other": "a grid setting"}
    assert datafiles.meaning("gain", decl) == "held-out gain"
    assert datafiles.meaning("gain_lo", decl) == "held-out gain: lower end of the 95% t interval of the mean"
    assert datafiles.meaning("final_eval", decl).startswith("held-out accuracy at the last step")
    assert datafiles.meaning("batch_size", decl) == "a grid setting"
    assert datafiles.meaning("batch_size", {"columns": {}}) is None
    files = [{"name": "x", "columns": [("a", "described"), ("b", None)]}]
    assert datafiles.undescribed(files) == {"x": ["b"]}


def test_verdict_text_states_a_shared_failure_once_and_links_it():
    from mathrl.analysis.section_verdicts import verdict_rows

    reason = "failure not established: collapse (aggressive) not established: x 0.1 (needs >= 0.5)"
    checks = reason.split(": ", 1)[1] + "; engaged (a) engaged: y 2 (needs >= 1)"
    rows = pd.DataFrame(
        {
            "key": ["first", "second"],
            "claim": ["a", "b"],
            "outcome": ["not judged"] * 2,
            "reason": [reason] * 2,
            "engaged": [checks] * 2,
            "note": ["", ""],
            "unit": ["num"] * 2,
            "diff": [math.nan] * 2,
            "n": [5, 5],
        }
    )
    first, second = verdict_rows(rows)
    assert str(first["said"]) == (
        "Not judged: failure not established: collapse (aggressive) not established: x 0.1 (needs &gt;= 0.5). "
        "Other checks: engaged (a) engaged: y 2 (needs &gt;= 1)."
    )
    assert str(second["said"]) == (
        'Not judged: failure not established: collapse (aggressive) not established (as for <a href="#claim-first">'
        'first</a>). Other checks: engaged (a) engaged (as for <a href="#claim-first">first</a>).'
    )
    assert first["short"] == "failure not established: collapse (aggressive) not established"
    assert isinstance(first["said"], Markup)
