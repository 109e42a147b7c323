"""Fault injection in the report: a non-finite loss shows, a missing run is marked and
never invented, a run trained with other settings than the config's is left out and named,
free text is escaped."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import copy_tree, run_dir, write_config

from mathrl.pipeline.cli import main

pytestmark = pytest.mark.faults


# --- a non-finite loss, and a missing run, in the report -----------------------------------

DESCRIPTION = "<script>alert('x')</script> & friends"


@pytest.fixture(scope="module")
def reported(tree, tmp_path_factory) -> dict:
    """An experiment of two runs: `nan` (non-finite loss at step 2) is run, `clean` is not;
    then `mathrl aggregate` and `mathrl report` on that tree."""
    experiments = {"fault": {"description": DESCRIPTION, "fixed": {"steps": 3},
                             "variants": {"nan": {"fault_nan_step": 2}, "clean": {}}, "seeds": [0]}}  # fmt: skip
    e = copy_tree(tree, tmp_path_factory.mktemp("reported"), experiments=experiments)
    assert main(["train", "--config", str(e["config"]), "--run", "fault__nan__s0"]) == 0
    assert main(["aggregate", "--config", str(e["config"])]) == 0
    assert main(["report", "--config", str(e["config"])]) == 0
    tables = e["results"] / "tables"
    return {**e, "runs": pd.read_csv(tables / "runs.csv").set_index("run_id"),
            "curves": pd.read_csv(tables / "curves.csv"),
            "alerts": pd.read_csv(tables / "alerts.csv"),
            "html": (e["results"] / "report.html").read_text()}  # fmt: skip


def section(html: str, sid: str) -> str:
    return re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)[1]


def test_nonfinite_loss_shows_in_the_report(reported):
    alerts = reported["alerts"]
    assert alerts[["run_id", "step", "kind"]].values.tolist() == [["fault__nan__s0", 2, "nonfinite"]]
    assert "nonfinite" in reported["runs"].loc["fault__nan__s0", "alert_kinds"]
    alerts_section = section(reported["html"], "alerts")
    rows = re.findall(r"<tr>(.*?)</tr>", alerts_section, re.S)  # by kind: one alert, in one run of one experiment
    assert [r for r in rows if ">nonfinite<" in r and r.count('class="num">1<') == 3], rows
    assert 'href="tables/alerts.csv"' in alerts_section  # the alert itself, with its run and step, is in the file


def test_missing_run_is_marked_and_never_invented(reported):
    runs, curves, html = reported["runs"], reported["curves"], reported["html"]
    assert runs.loc["fault__clean__s0", "status"] == "missing" and runs.loc["fault__nan__s0", "status"] == "complete"
    assert set(curves["run_id"]) == {"fault__nan__s0"} and len(curves) == 3
    assert not (run_dir(reported, "fault__clean__s0")).exists()  # reading the tree wrote nothing there
    row = re.search(r"<tr><td[^>]*>fault</td>.*?</tr>", section(html, "runs"), re.S)[0]
    cells = re.findall(
        r"<td[^>]*>(.*?)</td>", row
    )  # experiment, runs, trained here, shared, complete, stopped, without
    assert cells[:7] == ["fault", "2", "2", "0", "1", "0", "1"], cells
    assert "1 run(s) are missing, unreadable or stale" in html


def test_a_run_trained_with_other_settings_is_stale_and_left_out(reported, capsys):
    """A results tree whose config changed after a run was trained (copied from another commit, say: Snakemake has
    no record of it, so nothing retrains it) must not pass that run off as the config's."""
    experiments = {"fault": {**reported["cfg"]["experiments"]["fault"],
                             "variants": {"nan": {"fault_nan_step": 3}, "clean": {}}}}  # fmt: skip
    config = write_config(reported["dir"] / "changed.yaml", {**reported["cfg"], "experiments": experiments})
    tables = reported["dir"] / "changed-tables"
    capsys.readouterr()
    assert main(["aggregate", "--config", str(config), "--out", str(tables)]) == 1
    err = capsys.readouterr().err
    assert "1 run(s) were trained with settings other than the config's" in err and "fault_nan_step 2 -> 3" in err
    runs = pd.read_csv(tables / "runs.csv").set_index("run_id")
    assert (
        runs.loc["fault__nan__s0", "status"] == "stale"
        and "fault_nan_step 2 -> 3" in runs.loc["fault__nan__s0", "problem"]
    )
    assert (tables / "curves.csv").read_text().strip() == ""  # its metrics are not among the results
    assert not (reported["dir"] / "changed-tables.complete").exists()


def test_free_text_is_escaped_in_the_report(reported):
    html = reported["html"]
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; friends" in html
