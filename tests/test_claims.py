"""The claims engine: declarations, arms, statistics, checks and the family's adjustment, on
tables small enough to check by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from mathrl.analysis import claims
from mathrl.pipeline.errors import ConfigError

CFG = {"experiments": {"e": {"seeds": [0, 1, 2], "roles": {"ref": "base", "remedy": "fix", "point": "batch_size=512"}}}}


def table(**cols) -> pd.DataFrame:
    return pd.DataFrame(cols)


def judge(decl: dict, tables: dict, cfg: dict = CFG) -> dict:
    claims.validate(decl, decl["id"])
    (d,) = claims.expand(decl, tables, cfg)
    return claims.judge_claim(claims.parse(d, d["id"]), tables, cfg)


RUNS = table(
    variant=["base"] * 3 + ["fix"] * 3,
    seed=[0, 1, 2] * 2,
    acc=[0.50, 0.52, 0.48, 0.55, 0.58, 0.57],
    experiment=["e"] * 6,
)


def test_paired_difference_by_role():
    r = judge({"id": "x", "kind": "document", "statement": "fix beats base", "measure": "acc", "experiment": "e",
               "table": "t",
               "a": {"role": "remedy"}, "b": {"role": "ref"}}, {"t": RUNS})  # fmt: skip
    d = [0.05, 0.06, 0.09]  # fix − base, seed by seed
    half = stats.t.ppf(0.975, 2) * stats.tstd(d) / math.sqrt(3)
    assert r["difference"] == pytest.approx(sum(d) / 3) and r["n"] == 3 and r["design"] == "paired"
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((sum(d) / 3 - half, sum(d) / 3 + half))
    assert r["p_value"] == pytest.approx(stats.ttest_1samp(d, 0).pvalue) and r["outcome"] == "agrees"


def test_one_sample_against_a_value_and_the_wrong_side():
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "acc", "table": "t",
               "a": {"variant": "base"}, "value": 0.6},
              {"t": RUNS})  # fmt: skip
    assert r["difference"] == pytest.approx(-0.1) and r["outcome"] == "disagrees"  # the interval lies below the value


def test_a_correlation_is_averaged_by_fisher_z():
    r_seed = [0.90, 0.95, 0.99]
    t = table(seed=[0, 1, 2], corr=r_seed)
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "corr", "table": "t",
               "compare": "correlation", "a": {}}, {"t": t})  # fmt: skip
    z = [math.atanh(x) for x in r_seed]  # 1.4722, 1.8318, 2.6467: their mean 1.9836, sd 0.6017
    half = stats.t.ppf(0.975, 2) * stats.tstd(z) / math.sqrt(3)
    mean = sum(z) / 3
    assert r["difference"] == pytest.approx(math.tanh(mean)) and r["difference"] == pytest.approx(0.9628, abs=1e-4)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((math.tanh(mean - half), math.tanh(mean + half)))
    assert r["ci_high"] < 1 and r["p_value"] == pytest.approx(stats.ttest_1samp(z, 0).pvalue)
    assert r["outcome"] == "agrees" and r["n"] == 3


@pytest.mark.parametrize(
    ("compare", "b", "says"),
    [("correlation", {"variant": "fix"}, "takes no arm b"), ("relative", None, "takes an arm b")],
)
def test_a_comparison_given_the_wrong_arms_is_refused(compare, b, says):
    decl = {"id": "x", "kind": "document", "statement": "s", "measure": "acc", "table": "t", "compare": compare,
            "a": {"variant": "base"}, **({"b": b} if b else {})}  # fmt: skip
    with pytest.raises(ConfigError, match=f"compare {compare} {says}"):
        judge(decl, {"t": RUNS})


def test_rates_wilson_and_newcombe():
    t = table(arm=["a"] * 10 + ["b"] * 10, seed=list(range(10)) * 2, collapsed=[1.0] * 10 + [0.0] * 10)
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "collapsed", "table": "t", "compare": "rate",
               "a": {"arm": "a"}, "b": {"arm": "b"}}, {"t": t})  # fmt: skip
    assert r["difference"] == 1.0 and r["ci_low"] > 0.6 and r["note"] == "10 of 10 runs against 0 of 10"
    assert r["p_value"] == pytest.approx(stats.fisher_exact([[10, 0], [0, 10]]).pvalue) and r["outcome"] == "agrees"
    one = judge({"id": "y", "kind": "setup", "statement": "s", "measure": "collapsed", "table": "t", "compare": "rate",
                 "value": 0.5,
                 "a": {"arm": "a"}}, {"t": t})  # fmt: skip
    lo, hi = stats.binomtest(10, 10).proportion_ci(method="wilson")
    assert (one["ci_low"], one["ci_high"]) == pytest.approx((lo - 0.5, hi - 0.5))


def test_grid_point_role_max_and_the_statement_shows_it():
    t = table(batch_size=[64, 64, 512, 512], seed=[0, 1, 0, 1], rough=[0.05, 0.07, 0.01, 0.02])
    r = judge({"id": "x", "kind": "document", "statement": "batch {a.batch_size} is smoother than {b.batch_size}",
               "measure": "rough",
               "table": "t", "a": {"batch_size": "max"}, "b": {"batch_size": "min"}, "expect": {"direction": -1}},
              {"t": t})  # fmt: skip
    assert r["statement"] == "batch 512 is smoother than 64" and r["difference"] == pytest.approx(-0.045)
    role = judge({"id": "y", "kind": "reference", "statement": "s", "measure": "rough", "table": "t", "experiment": "e",
                  "a": {"role": "point"}}, {"t": t})  # fmt: skip
    assert role["n"] == 2 and role["difference"] == pytest.approx(0.015)


def test_pooled_rows_are_not_values():
    t = table(setting=["s", "s", "s"], seed=["0", "1", "all"], v=[1.0, 3.0, 2.0])
    r = judge(
        {"id": "x", "kind": "document", "statement": "s", "measure": "v", "table": "t", "a": {"setting": "s"}}, {"t": t}
    )
    assert r["n"] == 2 and r["difference"] == 2.0


def test_a_remedy_waits_for_its_failure_and_its_mechanism():
    t = RUNS.assign(fall=[0.02] * 6, acted=[0.0] * 3 + [0.3] * 3)
    decl = {"id": "x", "kind": "document", "statement": "s", "measure": "acc", "table": "t", "experiment": "e",
            "a": {"role": "remedy"}, "b": {"role": "ref"},
            "checks": [{"type": "failure", "label": "collapse (base)", "measure": "fall", "arm": "b", "at_least": 0.5},
                       {"type": "engaged", "label": "rule (fix)", "measure": "acted", "arm": "a",
                        "at_least": 0.1}]}  # fmt: skip
    r = judge(decl, {"t": t})
    assert r["outcome"] == "not judged" and r["failure_established"] is False and r["engaged"] is True
    assert r["reason"].startswith("failure not established: collapse (base) not established: fall 0.02 (needs >= 0.5)")
    assert judge(decl, {"t": t.assign(fall=0.9)})["outcome"] == "agrees"


def test_a_check_at_its_threshold_up_to_float_rounding_passes():
    """A setting logged at every step and averaged (an entropy bonus of 0.02 over 200 steps) comes out a few ulps
    below itself; it meets a threshold equal to the setting, and a value below it by more than rounding does not."""
    mean = 0.019999999999999997  # what a 200-step run's table held for its bonus of 0.02
    assert mean == math.nextafter(0.02, 0)
    decl = {
        "id": "x",
        "kind": "document",
        "statement": "s",
        "measure": "acc",
        "table": "t",
        "experiment": "e",
        "a": {"role": "remedy"},
        "b": {"role": "ref"},
        "checks": [{"type": "engaged", "label": "bonus (fix)", "measure": "coef", "arm": "a", "at_least": 0.02}],
    }
    r = judge(decl, {"t": RUNS.assign(coef=mean)})
    assert r["engaged"] is True and r["outcome"] == "agrees"
    assert judge(decl, {"t": RUNS.assign(coef=0.0199)})["outcome"] == "not judged"
    assert claims.within(0.1, 0.1 + 1e-17) and claims.within(0.3 - 1e-17, 0.3) and not claims.within(0.3, 0.2999)


def test_equal_samples_ratio_check_and_ci_low():
    t = RUNS.assign(samples=[100.0] * 3 + [200.0] * 3)
    check = {
        "type": "engaged",
        "label": "equal samples",
        "measure": "samples",
        "arm": "a",
        "ratio_to": "b",
        "at_least": 0.75,
        "at_most": 1.33,
    }
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "acc", "table": "t", "a": {"variant": "fix"},
               "b": {"variant": "base"},
               "checks": [check]}, {"t": t})  # fmt: skip
    assert r["outcome"] == "not judged" and "samples 2 (needs >= 0.75 and <= 1.33)" in r["reason"]
    low = {"type": "precondition", "label": "learns", "measure": "acc", "arm": "a", "stat": "ci_low", "at_least": 0.6}
    r = judge(
        {
            "id": "y",
            "kind": "document",
            "statement": "s",
            "measure": "acc",
            "table": "t",
            "a": {"variant": "fix"},
            "checks": [low],
        },
        {"t": t},
    )
    assert r["outcome"] == "not judged" and r["reason"].startswith("precondition not met")


def test_equivalence_uses_two_one_sided_tests():
    t = table(
        arm=["a"] * 5 + ["b"] * 5,
        seed=list(range(5)) * 2,
        v=[0.500, 0.510, 0.490, 0.505, 0.495] + [0.501, 0.509, 0.492, 0.503, 0.497],
    )
    r = judge({"id": "x", "kind": "beyond", "statement": "s", "measure": "v", "table": "t", "a": {"arm": "a"},
               "b": {"arm": "b"},
               "expect": {"equivalence": 0.03}}, {"t": t})  # fmt: skip
    d = [a - b for a, b in zip(t["v"][:5], t["v"][5:])]
    tost = max(
        stats.ttest_1samp(d, -0.03, alternative="greater").pvalue, stats.ttest_1samp(d, 0.03, alternative="less").pvalue
    )
    # each one-sided test is read at 2.5%, as the 95% interval decides: the p is doubled, so p < 0.05 when it agrees
    assert r["outcome"] == "agrees" and r["p_value"] == pytest.approx(2 * tost)
    assert r["p_test"] == "against ±0.03 (two one-sided tests, the larger p doubled)"


SIZE = table(arm=["a"] * 5, seed=range(5), v=[0.10, 0.12, 0.11, 0.13, 0.09])


@pytest.mark.parametrize(
    "expect, outcome, null, side",
    [
        ({"direction": 1}, "agrees", 0.0, "two-sided"),
        ({"direction": 1, "size": [0.3, 0.5]}, "disagrees", 0.3, "two-sided"),  # the interval lies below the size
        ({"noninferior": 0.02}, "agrees", -0.02, "greater"),
        ({"noninferior": 0.02, "direction": -1}, "disagrees", 0.02, "greater"),  # beyond the margin, losing side
        ({"equivalence": 0.05}, "disagrees", 0.05, "greater"),
    ],
)
def test_the_p_value_is_the_test_behind_the_outcome(expect, outcome, null, side):
    """p < 0.05 exactly when the 95% interval decides: two-sided against the null the interval excludes, or a
    one-sided test (doubled) against a margin."""
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "v", "table": "t", "a": {"arm": "a"},
               "expect": expect}, {"t": SIZE})  # fmt: skip
    want = stats.ttest_1samp(SIZE["v"], null, alternative=side).pvalue * (1 if side == "two-sided" else 2)
    assert r["outcome"] == outcome and r["p_value"] == pytest.approx(want) and r["p_null"] == pytest.approx(null)


def test_a_rate_against_the_documents_size_gets_its_binomial_p():
    t = table(arm=["a"] * 10, seed=range(10), collapsed=[0.0] * 10)  # 0 of 10 against the document's 35%
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "collapsed", "table": "t",
               "compare": "rate", "a": {"arm": "a"}, "expect": {"size": [0.35, 0.35]}}, {"t": t})  # fmt: skip
    assert r["outcome"] == "disagrees" and r["p_value"] == pytest.approx(stats.binomtest(0, 10, 0.35).pvalue)


def test_point_claims_have_no_interval():
    r = judge({"id": "x", "kind": "setup", "statement": "s", "measure": "rel", "table": "t", "compare": "point",
               "a": {},
               "expect": {"size": [0.0, 1e-4]}}, {"t": table(rel=[3e-7])})  # fmt: skip
    assert r["outcome"] == "agrees" and math.isnan(r["ci_low"]) and "without an interval" in r["reason"]


def test_holm_demotes_a_document_claim_that_does_not_survive_the_family():
    rows = pd.DataFrame({"kind": ["document"] * 3 + ["setup"], "p_value": [0.02, 0.03, 0.04, 0.001],
                         "outcome": ["agrees"] * 4, "reason": ["r"] * 4, "p_holm": math.nan,
                         "p_bh": math.nan})  # fmt: skip
    out = claims.adjust(rows, "holm")
    assert list(out["p_holm"][:3]) == pytest.approx([0.06, 0.06, 0.06]) and list(out["p_bh"][:3]) == pytest.approx(
        [0.04, 0.04, 0.04]
    )
    assert (out["outcome"][:3] == "inconclusive").all() and "Holm" in out["reason"][0]
    assert out["outcome"][3] == "agrees" and math.isnan(out["p_holm"][3])  # setup checks are not in the family
    bh = claims.adjust(rows, "bh")  # Benjamini-Hochberg: each adjusted p is 0.04, below 0.05, so all three stand
    assert (bh["outcome"] == "agrees").all() and list(bh["reason"]) == ["r"] * 4


def test_a_claim_not_judged_is_no_member_of_the_family():
    rows = pd.DataFrame({"kind": ["document"] * 3, "p_value": [0.02, 0.03, 0.001],
                         "outcome": ["agrees", "agrees", "not judged"], "reason": ["r"] * 3, "p_holm": math.nan,
                         "p_bh": math.nan})  # fmt: skip
    out = claims.adjust(rows, "holm")  # a family of two: Holm's 0.04 and 0.04 (three would give 0.04, 0.04 and 0.003)
    assert list(out["p_holm"][:2]) == pytest.approx([0.04, 0.04]) and math.isnan(out["p_holm"][2])
    assert list(out["outcome"]) == ["agrees", "agrees", "not judged"]


def test_benjamini_hochberg_demotes_what_its_step_up_rule_does_not_reach():
    rows = pd.DataFrame({"kind": ["document"] * 3, "p_value": [0.01, 0.04, 0.3], "outcome": ["agrees"] * 3,
                         "reason": ["r"] * 3, "p_holm": math.nan, "p_bh": math.nan})  # fmt: skip
    out = claims.adjust(rows, "bh")  # BH: 0.03, 0.06, 0.3
    assert list(out["p_bh"]) == pytest.approx([0.03, 0.06, 0.3])
    assert list(out["outcome"]) == ["agrees", "inconclusive", "inconclusive"]
    assert "Benjamini-Hochberg" in out["reason"][1]
    with pytest.raises(ConfigError, match="verdicts.adjustment.*holm, bh"):
        claims.adjust(rows, "bonferroni")


def test_a_zero_width_interval_is_exact_and_flagged():
    same = table(
        variant=["base"] * 3 + ["fix"] * 3, seed=[0, 1, 2] * 2, acc=[0.5, 0.6, 0.7, 0.6, 0.7, 0.8]
    )  # fix − base: 0.1 at every seed
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "acc", "table": "t", "a": {"variant": "fix"},
               "b": {"variant": "base"}}, {"t": same})  # fmt: skip
    assert r["design"] == "exact" and r["ci_low"] == r["ci_high"] == pytest.approx(0.1) and r["n"] == 3
    assert math.isnan(r["mde"]) and math.isnan(r["effect_size"]) and "by construction" in r["note"]
    from mathrl.analysis.verdict import sentence

    text = sentence({**r, "diff": r["difference"]})
    assert "exactly" in text and "detects" not in text and "effect size" not in text
    setup = judge({"id": "y", "kind": "setup", "statement": "s", "measure": "acc", "table": "t",
                   "a": {"variant": "fix"},
                   "b": {"variant": "base"}}, {"t": same})  # fmt: skip
    assert (
        setup["design"] == "exact" and "by construction" not in setup["note"]
    )  # a setup check is expected to be exact
    t = table(arm=["a"] * 4, seed=range(4), hit=[1.0] * 4)
    rate = judge(
        {"id": "z", "kind": "reference", "statement": "s", "measure": "hit", "table": "t", "compare": "rate", "a": {}},
        {"t": t},
    )
    assert rate["outcome"] == "agrees" and "by construction" in rate["note"]  # 4 of 4 against 0


def test_an_equivalence_the_design_cannot_pass_says_so_with_seeds_and_margin():
    t = table(arm=["a"] * 3 + ["b"] * 3, seed=[0, 1, 2] * 2, v=[0.50, 0.60, 0.40, 0.50, 0.50, 0.50])
    r = judge({"id": "x", "kind": "beyond", "statement": "s", "measure": "v", "table": "t", "a": {"arm": "a"},
               "b": {"arm": "b"},
               "expect": {"equivalence": 0.05}}, {"t": t})  # fmt: skip
    assert r["outcome"] == "inconclusive" and "cannot pass at n=3" in r["reason"] and r["margin"] == 0.05
    assert "within ±0.05" in r["expected"] and r["seeds_needed"] > 3 and r["seeds_needed"] <= 1000


def test_seeds_are_given_for_inconclusive_rates_and_for_claims_holm_demotes():
    t = table(
        arm=["a"] * 5 + ["b"] * 5, seed=list(range(5)) * 2, hit=[1.0, 1.0, 1.0, 0.0, 0.0] + [1.0, 0.0, 0.0, 0.0, 0.0]
    )
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "hit", "table": "t", "compare": "rate",
               "a": {"arm": "a"}, "b": {"arm": "b"}}, {"t": t})  # fmt: skip
    assert r["outcome"] == "inconclusive" and r["seeds_needed"] > 5
    rows = pd.DataFrame({"kind": ["document"] * 3, "p_value": [0.02, 0.03, 0.04], "outcome": ["agrees"] * 3,
                         "reason": ["r"] * 3,
                         "p_holm": math.nan, "p_bh": math.nan, "sd": 0.1, "design": "paired", "effect_target": 0.2,
                         "seeds_needed": math.nan})  # fmt: skip
    out = claims.adjust(rows, "holm")
    assert (out["outcome"] == "inconclusive").all() and (out["seeds_needed"] > 2).all()
    assert out["seeds_needed"][0] >= out["seeds_needed"][2]  # the smallest p meets Holm's strictest level


def test_foreach_expands_lists_table_values_and_experiments():
    decl = {
        "foreach": {"x": ["a", "b"], "e": {"experiments_with_role": "ref"}},
        "id": "c_{x}_{e}",
        "statement": "{x}",
        "measure": "m",
        "a": {},
    }
    assert [d["id"] for d in claims.expand(decl, {}, CFG)] == ["c_a_e", "c_b_e"]
    star = {"foreach": {"k": "*"}, "id": "k{k}", "table": "t", "statement": "s", "measure": "m", "a": {"k": "{k}"}}
    assert [d["a"]["k"] for d in claims.expand(star, {"t": table(k=[2, 10, 2], seed=[0, 1, 2])})] == ["2", "10"]
    assert claims.expand(star, None)[0]["id"] == "k{k}"  # listed before any table exists


def test_bad_declarations_name_the_claim_and_the_key():
    with pytest.raises(ConfigError, match=r"mine.kind: 'guess' is not allowed; allowed: document"):
        claims.validate({"id": "x", "kind": "guess", "statement": "s", "measure": "m", "a": {}}, "mine")
    with pytest.raises(ConfigError, match=r"mine.*colour"):
        claims.validate({"id": "x", "statement": "s", "measure": "m", "a": {}, "colour": 1}, "mine")
    with pytest.raises(ConfigError, match="has no role 'nobody'"):
        judge(
            {
                "id": "x",
                "kind": "user",
                "statement": "s",
                "measure": "acc",
                "table": "t",
                "experiment": "e",
                "a": {"role": "nobody"},
            },
            {"t": RUNS},
        )
    doc = judge({"id": "x", "kind": "document", "statement": "s", "measure": "acc", "table": "t", "experiment": "e",
                 "a": {"role": "nobody"}},
                {"t": RUNS})  # a config without the study's role: shown, not judged  # fmt: skip
    assert doc["outcome"] == "not judged" and "declares no role 'nobody'" in doc["reason"]


def test_missing_table_is_not_judged():
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "m", "table": "absent", "a": {}}, {})
    assert r["outcome"] == "not judged" and "absent" in r["reason"]


def test_the_shipped_claims_parse_and_list():
    from mathrl.pipeline.config import load_config

    cfg = load_config()
    specs = claims.load(cfg, {})
    assert len({s.id for s in specs}) == len(specs) > 40
    assert {"document", "setup", "reference", "beyond"} <= {s.kind for s in specs}
    listed = claims.listing(cfg)
    assert listed["claim_id"].is_unique and listed["source"].str.len().gt(0).all()


def test_a_users_claim_from_yaml_to_the_report(tmp_path):
    """The user guide's example of a user's experiment (docs/guide/claims.md) with one declared claim: aggregate
    judges it (kind user, paired by seed), `mathrl claims` lists it, and the report's section for the experiment
    shows the verdict."""
    import copy

    import yaml

    from mathrl.pipeline.cli import main
    from mathrl.pipeline.config import ROOT
    from tests.conftest import TINY, write_config
    from tests.synthetic import curve, write_run

    example = yaml.safe_load((ROOT / "config" / "examples" / "grpo_vs_rloo.yaml").read_text())  # the guide's example
    example["experiments"]["grpo_vs_rloo"]["seeds"] = [0, 1, 2]
    cfg = {**copy.deepcopy(TINY), "results": str(tmp_path / "results"), **example}
    path = write_config(tmp_path / "mine.yaml", cfg)
    from mathrl.pipeline.config import load_config

    loaded = load_config(path)
    finals = {"grpo": [0.40, 0.42, 0.41], "rloo": [0.46, 0.49, 0.47]}
    for variant, accs in finals.items():
        for seed, acc in enumerate(accs):
            write_run(
                loaded,
                f"grpo_vs_rloo__{variant}__s{seed}",
                curve(4, 2, lambda s, a=acc: 0.3 + (a - 0.3) * s / 4),
                initial_eval=0.3,
            )
    assert main(["aggregate", "--config", str(path)]) == 0
    c = pd.read_csv(tmp_path / "results" / "tables" / "claims.csv").set_index("claim_id")
    r = c.loc["rloo_beats_grpo"]
    d = [0.06, 0.07, 0.06]
    assert (r.kind, r.section, r.part, r.outcome, r.n) == ("user", "generic", "grpo_vs_rloo", "agrees", 3)
    assert (
        r.difference == pytest.approx(sum(d) / 3) and r.ci_low > 0 and math.isnan(r.p_holm)
    )  # not in the documents' family
    assert main(["report", "--config", str(path)]) == 0
    html = (tmp_path / "results" / "report.html").read_text()
    section = html[html.index('<h3 id="generic-grpo_vs_rloo">') :]
    assert "RLOO&#39;s final held-out accuracy exceeds GRPO&#39;s, paired by seed" in section and "agrees" in section
    assert main(["claims", "--config", str(path), "--kind", "user"]) == 0


def test_a_failure_shown_as_a_loss_whose_interval_lies_below_zero():
    """minus_to with ci_high: the remedied setting's loss against a control, seed by seed, must lie below 0."""
    t = table(variant=["ctl"] * 3 + ["bad"] * 3 + ["fix"] * 3, seed=[0, 1, 2] * 3,
              acc=[0.50, 0.52, 0.51, 0.40, 0.43, 0.41, 0.49, 0.50, 0.50])  # fmt: skip
    loss = {
        "type": "failure",
        "label": "loss",
        "measure": "acc",
        "arm": "b",
        "minus_to": {"variant": "ctl"},
        "stat": "ci_high",
        "at_most": 0.0,
    }
    decl = {"id": "x", "kind": "beyond", "statement": "fix recovers", "measure": "acc", "table": "t",
            "a": {"variant": "fix"}, "b": {"variant": "bad"}, "checks": [loss]}  # fmt: skip
    r = judge(decl, {"t": t})
    assert r["failure_established"] is True and r["outcome"] == "agrees" and r["difference"] == pytest.approx(0.25 / 3)
    same = judge(decl, {"t": t.assign(acc=[0.50, 0.52, 0.51, 0.52, 0.50, 0.51, 0.49, 0.50, 0.50])})
    assert same["outcome"] == "not judged" and same["failure_established"] is False


def test_no_seeds_are_promised_where_the_difference_observed_lies_beyond_the_margin():
    t = table(arm=["a"] * 5, seed=range(5), v=[-0.10, 0.02, -0.05, 0.01, -0.06])  # mean -0.036: beyond -0.03
    r = judge({"id": "x", "kind": "beyond", "statement": "s", "measure": "v", "table": "t", "a": {"arm": "a"},
               "expect": {"noninferior": 0.03}}, {"t": t})  # fmt: skip
    assert r["outcome"] == "inconclusive" and math.isnan(r["seeds_needed"])
    assert "beyond the margin: at it no number of seeds would pass" in r["reason"]
    inside = judge({"id": "y", "kind": "beyond", "statement": "s", "measure": "v", "table": "t", "a": {"arm": "a"},
                    "expect": {"noninferior": 0.06}}, {"t": t})  # fmt: skip
    assert inside["outcome"] == "inconclusive" and inside["seeds_needed"] > 5  # more than the five that did not decide


def test_pair_on_makes_the_run_the_unit():
    """Alert precision against the base rate: one value per run and arm, paired by run_id (not by row)."""
    t = table(run_id=["r1", "r2", "r3", "r1", "r2", "r3", "r4"], source=["alert"] * 3 + ["step"] * 4,
              hit=[1.0, 0.5, 1.0, 0.4, 0.3, 0.5, 0.2])  # fmt: skip
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "hit", "table": "t",
               "a": {"source": "alert"}, "b": {"source": "step"}, "pair_on": "run_id"}, {"t": t})  # fmt: skip
    d = [0.6, 0.2, 0.5]  # r1-r3, the runs with an alert; r4 has none
    assert r["design"] == "paired" and r["n"] == 3 and r["difference"] == pytest.approx(sum(d) / 3)
    assert r["p_value"] == pytest.approx(stats.ttest_1samp(d, 0).pvalue)


def test_a_relative_difference_counts_the_baselines_uncertainty():
    """(a − b) / mean b by the delta method: var = (var d̄ − 2 R cov(d̄, b̄) + R² var b̄) / b̄², t on n − 1 df."""
    import numpy as np

    b, a = [1.0, 1.2, 0.8, 1.1], [0.5, 0.7, 0.5, 0.5]
    t = table(arm=["a"] * 4 + ["b"] * 4, seed=list(range(4)) * 2, v=a + b)
    r = judge({"id": "x", "kind": "document", "statement": "s", "measure": "v", "table": "t", "compare": "relative",
               "a": {"arm": "a"}, "b": {"arm": "b"}, "expect": {"direction": -1}}, {"t": t})  # fmt: skip
    d, base = np.subtract(a, b), np.array(b)
    ratio = d.mean() / base.mean()  # -0.475 / 1.025
    var = (d.var(ddof=1) - 2 * ratio * np.cov(d, base)[0, 1] + ratio**2 * base.var(ddof=1)) / 4 / base.mean() ** 2
    half = stats.t.ppf(0.975, 3) * np.sqrt(var)
    assert r["difference"] == pytest.approx(ratio) and r["design"] == "paired" and r["outcome"] == "agrees"
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((ratio - half, ratio + half))
    assert r["p_value"] == pytest.approx(2 * stats.t.sf(abs(ratio) / np.sqrt(var), 3))


@pytest.mark.parametrize("design", ["one_sample", "paired", "welch", "relative", "correlation"])
def test_p_below_005_exactly_when_the_interval_decides(design):
    """Across random data and every kind of expectation, the p of the test behind the outcome is below 0.05 exactly
    when the 95% interval decides the claim (agrees or disagrees), as a two-sided test's p matches its interval."""
    import numpy as np

    rng = np.random.default_rng(7)
    expects = [{"direction": 1}, {"direction": -1}, {"direction": 1, "size": [0.05, 0.1]}, {"noninferior": 0.05},
               {"noninferior": 0.05, "direction": -1}, {"equivalence": 0.08}]  # fmt: skip
    decided = 0
    for case in range(120):
        n, shift, spread = int(rng.integers(3, 12)), float(rng.normal(0, 0.1)), float(rng.uniform(0.01, 0.15))
        a = 1.0 + shift + spread * rng.standard_normal(n)
        b = 1.0 + spread * rng.standard_normal(n + (2 if design == "welch" else 0))
        seeds_b = list(range(len(b))) if design != "welch" else list(range(100, 100 + len(b)))
        t = table(arm=["a"] * n + ["b"] * len(b), seed=list(range(n)) + seeds_b, v=list(a) + list(b))
        decl = {"id": "x", "kind": "document", "statement": "s", "measure": "v", "table": "t", "a": {"arm": "a"},
                "expect": expects[case % len(expects)]}  # fmt: skip
        if design == "one_sample":
            decl["value"] = 1.0
        elif design == "correlation":  # correlations about 0: a's values moved into (-1, 1)
            t["v"] = np.tanh(t["v"] - 1.0)
            decl["compare"] = "correlation"
        else:
            decl["b"] = {"arm": "b"}
        if design == "relative":
            decl["compare"] = "relative"
        r = judge(decl, {"t": t})
        decides = r["outcome"] in ("agrees", "disagrees")
        decided += decides
        assert (r["p_value"] < 0.05) == decides, (case, r["outcome"], r["p_value"], r["p_test"])
    assert 10 < decided < 110  # both sides of the line were tried
