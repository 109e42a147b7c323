"""The operationalisation table and the rules every document claim follows (config/claims.yaml)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from mathrl.analysis import claims, coverage
from mathrl.pipeline.config import ROOT, layered, load_config

DEFAULT = load_config()
FULL = load_config(layered([ROOT / "config" / "full.yaml"]))
DATA = coverage.read()
SPECS = claims.load(DEFAULT)
DOCUMENT = [s for s in SPECS if s.kind == "document"]
SEEDS = ("lab04-training-challenges.md", "rl-stability-batch-and-hyperparameters.md", "training-collapse-analysis.md",
         "math-rl-training-system.md")  # fmt: skip


def test_every_document_claim_quotes_its_row_and_names_its_design():
    for spec in DOCUMENT:
        assert spec.quote and spec.translation, spec.id
        assert spec.design in DATA["designs"], f"{spec.id}: design {spec.design!r}"
        assert coverage.document_and_section(spec.source)[0] in SEEDS, spec.id
        assert spec.line in ("primary", "secondary"), spec.id


def test_a_documents_number_is_tested_only_where_it_means_the_same_here():
    """The one size rule: a document claim that tests a stated size (expect.size, or a document value it is compared
    with) says why the number carries over (scale-free, or the document's own setting)."""
    for spec in DOCUMENT:
        states_a_number = spec.size is not None or (spec.compare == "one_sample" and spec.value != 0)
        assert bool(spec.size_basis) == states_a_number, spec.id


def test_one_threshold_per_measure():
    """Every entropy-collapse failure asks for the same fall, every engagement of a clip or cap the same share."""
    thresholds = DATA["thresholds"]
    shares = {"clip_higher_freed", "clip_tighter_cut", "clip_frac", "is_clip_frac", "seq_clip_frac", "corrected_frac",
              "cov_frac", "clip_bound", "dual_clip_frac"}  # fmt: skip
    seen = set()
    for spec in SPECS:
        for c in spec.checks:
            if c.measure == "entropy_reduction" and c.type == "failure":
                assert c.at_least == thresholds["entropy_collapse"], spec.id
                seen.add("entropy")
            if c.measure in shares and c.type == "engaged" and c.at_least is not None:
                assert c.at_least == thresholds["acted_share"], (spec.id, c.label)
                seen.add("share")
    assert seen == {"entropy", "share"}


def test_the_family_counts_primary_document_lines_only():
    frame = pd.DataFrame([{"kind": s.kind, "line": s.line} for s in SPECS])
    family = claims.in_family(frame)
    assert family.sum() == sum(s.kind == "document" and s.line == "primary" for s in SPECS)
    assert any(s.line == "secondary" for s in DOCUMENT)  # the SGD clipping line, shown but not counted


def test_no_document_claim_is_a_setup_check():
    """Setup checks (true by construction or nearly) and analyses no document states are other kinds."""
    for spec in SPECS:
        if spec.kind in ("setup", "beyond", "reference"):
            assert not spec.quote, f"{spec.id}: a {spec.kind} claim quotes a document row"
    for key in ("gradvar", "accumulation", "clipping_spike_collapses", "clipping_bounds_spike", "kl_grid_order"):
        assert next(s for s in SPECS if s.id == key).kind == "setup"
    assert all(s.kind == "beyond" for s in SPECS if s.id.startswith("equal_samples_"))


@pytest.mark.parametrize("cfg", [DEFAULT, FULL], ids=["default", "full"])
def test_the_table_covers_every_document_with_a_status_for_each_row(cfg):
    table = coverage.table(cfg)
    assert set(table["document"]) == set(SEEDS)
    assert set(table["status"]) <= set(coverage.STATUSES)
    untestable = table[table["status"] == "not testable at this scale"]
    assert (untestable["why"].str.len() > 0).all() and (untestable["claim_ids"] == "").all()
    judged = {s.id for s in claims.load(cfg)}
    for row in table[table["status"] == "tested"].itertuples():
        named = [c for c in row.claim_ids.split(";") if c]
        if named:  # a row covered by claims names ones that exist ("{...}" a claim expanded over a table's values)
            assert all(c in judged or "{" in c for c in named), row.row_id
        else:
            assert row.why, row.row_id  # covered by a test of the pipeline: said where


def test_rows_judged_only_at_the_documents_scale_are_judged_there():
    default, full = coverage.table(DEFAULT), coverage.table(FULL)
    scale_only = default[default["status"] == "tested at the documents' scale only"]
    assert len(scale_only) > 0 and scale_only["why"].str.contains("config/full.yaml").all()
    assert set(full.loc[full["row_id"].isin(scale_only["row_id"]), "status"]) == {"tested"}


def test_fails_if_and_the_minimal_effect_follow_from_how_a_claim_is_judged():
    spec = next(s for s in DOCUMENT if s.id == "kl_remedy")
    assert coverage.fails_if(spec).startswith("the 95% interval lies below 0; judged only once the failure is shown")
    assert coverage.minimal_effect(spec) == "3 points of held-out accuracy"
    assert coverage.minimal_effect(next(s for s in DOCUMENT if s.id == "value_clip")).endswith("(scale-free)")
    stable = next(s for s in DOCUMENT if s.id == "add_stable")
    assert coverage.fails_if(stable).startswith("the 95% interval lies beyond 0.03 on the losing side")
    assert not math.isnan(DATA["thresholds"]["minimal_pts"])


def test_claims_csv_carries_the_quote_the_status_and_the_line():
    row = claims.judge_claim(next(s for s in SPECS if s.id == "kl_remedy"), {}, DEFAULT)
    assert row["quote"] and row["status"] == "tested" and row["line"] == "primary" and row["design_key"]
