"""The HTML report, rendered from a synthetic results tree that covers every study.

One tree is built per session (the browser test in test_browser.py reuses it): every
experiment of config/config.yaml with two seeds and a few steps, the bandit studies run for
real on a short budget, a gradient-variance probe and warm-up summaries; one run is missing
and one unreadable (its summary.json is cut short). `mathrl aggregate` (which names that run and
exits 1), `figures` and `report` then run as the pipeline runs them. The tests check that the
page is one self-contained, well-formed document and that its numbers are the aggregated CSVs'
numbers.
"""

from __future__ import annotations

import base64
import io
import math
import re
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import mathrl.analysis.report
from mathrl.analysis.report import fmt, html_table, pct
from mathrl.engine import bandit
from mathrl.pipeline.config import DEFAULT_CONFIG, expand_runs, load_config
from tests import synthetic
from tests.conftest import write_config
from tests.synthetic import write_json, write_run

SECTIONS = [
    "findings",
    "coverage",
    "limitations",
    "claims",
    "calibration",
    "lab04",
    "stability",
    "collapse",
    "system",
    "diagnostics",
    "generic",
    "runs",
    "alerts",
    "data",
    "repro",
]
# (experiment, variant, grid point, seed) of the run left out and of the run whose summary.json is unreadable
MISSING = ("batch", "b512", {}, 1)
UNREADABLE = ("system", "mul", {}, 1)
STEPS, EVAL_EVERY = 8, 2
INJECTED = '<script>alert("description")</script>'  # in an experiment's free-text description
INJECTED_ALERT = "<img src=x onerror=alert(2)> & <b>bold</b>"  # in an alert message read from a summary.json

# CSV tables each section must render through the `table()` helper, unchanged: their cells are checked.
REQUIRED_TABLES = {
    "calibration": {"calibration_pilot", "calibration_pick", "calibration_below"},
    "lab04": {"lab04_local_optima", "lab04_vanishing", "lab04_hacking", "lab04_gpt"},
    "stability": {"stability_batch_curve", "stability_batch", "stability_gradvar", "stability_accumulation",
                  "stability_fixed_vs_dynamic",
                  "stability_case_study", "stability_clipping", "stability_value_clip", "stability_troubleshooting"},
    "collapse": {"collapse_variants", "collapse_reward_design", "collapse_nonfinite"},
    "system": {"system_results", "system_console"},
    "runs": {"sft"},
}  # fmt: skip


# ---------------------------------------------------------------------------------------
# The synthetic tree


def make_config(tmp: Path) -> Path:
    """config/config.yaml with two seeds, STEPS steps per run and a 20-step, one-seed bandit."""
    d = yaml.safe_load(DEFAULT_CONFIG.read_text())
    d["results"] = str(tmp / "results")
    d["standalone"] = True  # read alone: the steps removed below must not come back from config/config.yaml
    d["train"].update(steps=STEPS, eval_every=EVAL_EVERY, log_every=1, snapshot_every=STEPS)
    for exp in d["experiments"].values():
        exp["seeds"] = [0, 1]
        exp.pop("variant_seeds", None)  # every arm at the two seeds
        exp.setdefault("fixed", {})["steps"] = STEPS
        for settings in (exp.get("variants") or {}).values():
            settings.pop("steps", None)
            if "lr_decay_every" in settings:
                settings["lr_decay_every"] = 2
            if "curriculum_every" in settings:
                settings["curriculum_every"] = 2
    d["experiments"]["lab04_gpt"]["description"] = f"Lab 04 on the GPT {INJECTED} & friends."
    d["bandit"] = {**d.get("bandit", {}), "steps": 20, "seeds": [0]}
    for study in d["bandit"].get("studies", {}).values():  # settings that pin their own length run 20 steps too
        for settings in (study.get("settings") or {}).values():
            settings.pop("steps", None)
    d["bandit"].setdefault("studies", {})["gradient_vanishing"] = {"phase_steps": 5}
    return write_config(tmp / "config.yaml", d)


def run_rows(spec, rng) -> list[dict]:
    """A plausible metrics.csv for one run: accuracy drifting up or down, every column filled."""
    s = spec.settings.as_dict()
    steps, slope = s["steps"], rng.uniform(-0.02, 0.04)
    ppo = s["algorithm"] == "ppo"
    rows = []
    for step in range(1, steps + 1):
        acc = float(np.clip(0.4 + slope * step + rng.normal(0, 0.03), 0, 1))
        row = {
            "step": step, "samples": s["batch_size"] * step, "reward_mean": acc, "reward_std": 0.3, "accuracy": acc,
            "entropy": 0.35 - 0.02 * step, "kl": 0.01 * step, "kl_coef": s["kl_coef"],
            "grad_norm": float(rng.uniform(0.2, 1.5)),
            "policy_loss": float(rng.normal(0, 0.1)), "value_loss": 0.05 if ppo else math.nan, "clip_frac": 0.1,
            "frac_zero_std": 0.3, "lr": s["lr"], "seconds": 0.5 + 0.1 * spec.seed, "ndigit": 2, "format_rate": 0.9,
            "baseline": acc, "entropy_coef": s.get("entropy_coef", 0.0),
            "value_rmse": 0.3 - 0.01 * step if ppo else math.nan,
            "explained_variance": 0.4 if ppo else math.nan, "skipped": 0, "sample_seconds": 0.3, "update_seconds": 0.2,
        }  # fmt: skip
        if step % s["eval_every"] == 0 or step == steps:
            row["eval_accuracy"] = acc
        rows.append(row)
    return rows


def run_id_of(specs: dict, experiment: str, variant: str | None, point: dict, seed: int) -> str:
    """The id of one run, whatever the id scheme."""
    (run_id,) = [
        r for r, s in specs.items() if (s.experiment, s.variant, s.point, s.seed) == (experiment, variant, point, seed)
    ]
    return run_id


def write_tree(cfg: dict) -> dict[str, str]:
    """Every run but MISSING, UNREADABLE cut short; bandit CSVs, gradvar, warm-ups, a log."""
    specs = expand_runs(cfg)
    missing, unreadable = run_id_of(specs, *MISSING), run_id_of(specs, *UNREADABLE)
    noisy = run_id_of(specs, "clipping", "spike_no_clip", {}, 0)
    low_entropy = run_id_of(specs, "batch", "b64", {}, 0)
    for run_id, spec in specs.items():
        if run_id == missing:
            continue
        rng = np.random.default_rng(zlib.crc32(run_id.encode()))
        rows, status, alerts = run_rows(spec, rng), "complete", []
        if spec.variant == "huge_lr":
            for r in rows[1:]:
                r["skipped"] = 1  # the guard skipped every update from step 2 on
            if spec.seed == 1:
                rows, status = rows[:3], "stopped_nonfinite"
        if run_id == noisy:
            alerts = [{"step": 3, "kind": "reward_swing", "value": 0.4, "threshold": 0.3, "message": INJECTED_ALERT},
                      {"step": 6, "kind": "high_kl", "value": 0.7, "threshold": 0.5,
                       "message": "KL 0.7 > 0.5"}]  # fmt: skip
        if run_id == low_entropy:
            alerts = [
                {"step": 4, "kind": "low_entropy", "value": 0.05, "threshold": 0.1, "message": "entropy 0.05 < 0.1"}
            ]
        write_run(cfg, run_id, rows, initial_eval=0.4, status=status, alerts=alerts)
    (Path(cfg["results"]) / "runs" / unreadable / "summary.json").write_text("{truncated")
    block = cfg["bandit"]
    for study in bandit.BANDIT_STUDIES:
        bandit.write_study(bandit.run_study(study, block), Path(cfg["results"]) / "bandit" / study / "metrics.csv")
    write_json(cfg, "gradvar/add.json", {
        "variance": [{"batch_size": 64, "variance": 8.2e-4}, {"batch_size": 512, "variance": 1.4e-4}],
        "accumulation": {"batch_size": 512, "micro_batch_size": 128, "steps": 4, "max_abs_difference": 2e-9,
                         "max_abs_gradient": 0.1, "relative": 2e-8}})  # fmt: skip
    for task, acc in (("add", 0.45), ("mul", 0.38), ("add1", 0.97)):
        band = cfg["sft"][task]["band"]
        write_json(cfg, f"sft/{task}/w0/summary.json", {
            "settings": {"preset": cfg["sft"][task]["preset"]}, "model": {"n_layer": 2, "n_head": 4, "n_embd": 128},
            "n_params": 400256, "steps": 425, "eval_accuracy": acc, "band": band, "in_band": band[0] <= acc <= band[1],
            "wall_seconds": 12.5})  # fmt: skip
    log = Path(cfg["results"]) / "logs" / "train" / f"{run_id_of(specs, 'system', 'add', {}, 0)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"Step {STEPS}/{STEPS} | Loss 0.123 | Acc 0.500 | Eval 0.600\n")
    return {
        "experiments": {run_id: spec.experiment for run_id, spec in specs.items()},
        "missing": missing,
        "unreadable": unreadable,
        "stopped": run_id_of(specs, "collapse", "huge_lr", {}, 1),
    }


def build(tmp: Path, record: list) -> dict:
    """The tree, then `mathrl aggregate`, `figures` and `report` as the pipeline runs them;
    every call of the template's `table()` helper is recorded in `record`."""
    from mathrl.pipeline.cli import main

    path = make_config(tmp)
    cfg = load_config(path)
    specs = expand_runs(cfg)

    def recording_table(df, columns=None, formats=None, caption=""):
        out = html_table(df, columns, formats, caption)
        record.append({"df": df, "columns": columns, "formats": formats or {}, "caption": caption, "html": str(out)})
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            synthetic, "expand_runs", lambda _cfg: specs
        )  # write_run would expand (and validate) the config per run
        ids = write_tree(cfg)
        for command in ("aggregate", "figures", "report"):
            if command == "report":
                mp.setattr(mathrl.analysis.report, "html_table", recording_table)
            # aggregate names the unreadable run and says its tables are not the pipeline's
            assert main([command, "--config", str(path)]) == (1 if command == "aggregate" else 0), command
    results = Path(cfg["results"])
    return {"cfg": cfg, "config": path, "results": results, "html": (results / "report.html").read_text(), **ids}


def shared_report_tree(request, tmp_path_factory) -> dict:
    """The built tree and its report, once per test session whichever module asks first: pytest
    imports this file as a test module and test_browser.py imports it again under another name,
    so the cache lives on the session's config, not in a module global or a shared fixture."""
    built = getattr(request.config, "_mathrl_report_tree", None)
    if built is None:
        record: list = []
        built = build(tmp_path_factory.mktemp("report"), record)
        built["tables_called"] = record
        request.config._mathrl_report_tree = built
    return built


@pytest.fixture(scope="session")
def report_tree(request, tmp_path_factory) -> dict:
    return shared_report_tree(request, tmp_path_factory)


# ---------------------------------------------------------------------------------------
# A small DOM from html.parser


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict, parent: Node | None):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def iter(self, tag: str | None = None):
        for c in self.children:
            if isinstance(c, Node):
                if tag is None or c.tag == tag:
                    yield c
                yield from c.iter(tag)

    def text(self) -> str:
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return " ".join(" ".join(parts).split())

    def find(self, tag: str, **attrs) -> Node | None:
        return next((n for n in self.iter(tag) if all(n.attrs.get(k) == v for k, v in attrs.items())), None)


class Dom(HTMLParser):
    """A tree of the page; `errors` lists end tags that close nothing open or skip open tags."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#document", {}, None)
        self.errors: list[str] = []
        self.decls: list[str] = []
        self.feed(html)
        self.close()
        open_tags = []
        while self.cur is not self.root:
            open_tags.append(self.cur.tag)
            self.cur = self.cur.parent
        if open_tags:
            self.errors.append(f"never closed: {open_tags}")

    def handle_decl(self, decl):
        self.decls.append(decl)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, dict(attrs), self.cur))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if self.cur.tag != tag:
            line, col = self.getpos()
            self.errors.append(f"line {line}: </{tag}> closes <{self.cur.tag}>")
            n = self.cur
            while n is not self.root and n.tag != tag:
                n = n.parent
            if n is self.root:
                return
            self.cur = n
        self.cur = self.cur.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def table_cells(table: Node) -> tuple[list[str], list[list[str]]]:
    """Header texts and body rows (cell texts) of one table."""
    head = [th.text() for th in table.find("thead").iter("th")] if table.find("thead") else []
    body = table.find("tbody") or table
    return head, [[td.text() for td in tr.iter("td")] for tr in body.iter("tr") if tr.find("td") is not None]


def section_html(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}">')
    return html[start : html.index("</section>", start)]


@pytest.fixture(scope="module")
def dom(report_tree) -> Dom:
    return Dom(report_tree["html"])


def csv(report_tree, name: str) -> pd.DataFrame:
    return pd.read_csv(report_tree["results"] / "tables" / f"{name}.csv")


def py(value):
    """A CSV cell as Python sees it (numpy scalars unwrapped), for fmt/pct."""
    return value.item() if isinstance(value, np.generic) else value


def expected_text(value, spec: str | None) -> str:
    value = py(value)
    if spec == "pts":  # a difference of shares, in accuracy points
        return "–" if value != value else f"{100 * value:.1f} pts"
    return pct(value) if spec == "pct" else fmt(value, spec or ".3g")


def test_differences_of_shares_print_in_points():
    """A column of accuracy differences reads as points, as the verdicts and sentences beside it do."""
    df = pd.DataFrame({"final": [0.483], "gain": [-0.276], "std": [math.nan]})
    table = str(html_table(df, formats={"final": "pct", "gain": "pts", "std": "pts"}))
    assert ">48.3%<" in table and ">-27.6 pts<" in table and ">–<" in table


# ---------------------------------------------------------------------------------------
# The page as a document


def test_pipeline_outputs(report_tree):
    r = report_tree["results"]
    assert (r / "report.html").stat().st_size > 10_000
    assert len(list((r / "figures").glob("*.png"))) >= 10
    assert (r / "runs" / report_tree["unreadable"] / "summary.json").read_text() == "{truncated" and not (
        r / "runs" / report_tree["missing"]
    ).exists()
    assert report_tree["tables_called"], "the report rendered its tables through the table() helper"


def test_html_is_well_formed(report_tree, dom):
    assert dom.errors == []
    assert [d.lower() for d in dom.decls] == ["doctype html"]
    html = dom.root.find("html")
    assert html is not None and html.attrs.get("lang") == "en"
    assert dom.root.find("meta", charset="utf-8") is not None
    assert dom.root.find("title").text()
    ids = [n.attrs["id"] for n in dom.root.iter() if "id" in n.attrs]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_every_section_present(dom):
    sections = [n.attrs.get("id") for n in dom.root.iter("section")]
    assert sections == SECTIONS
    for sid in SECTIONS:
        sec = dom.root.find("section", id=sid)
        assert sec.find("h2") is not None and sec.find("h2").text(), sid
        assert len(sec.text()) > 200, sid
    toc = [a.attrs["href"] for a in dom.root.find("nav").iter("a")]
    assert toc == [f"#{s}" for s in SECTIONS if s != "findings"]  # the findings are the page's first screen


def test_links_resolve(report_tree, dom):
    """A link is an anchor of the page or a data file beside it (a relative path to an existing CSV)."""
    ids = {n.attrs["id"] for n in dom.root.iter() if "id" in n.attrs}
    hrefs = [a.attrs.get("href", "") for a in dom.root.iter("a")]
    anchors, files = [h for h in hrefs if h.startswith("#")], [h for h in hrefs if not h.startswith("#")]
    assert anchors and sorted({h for h in anchors if h[1:] not in ids}) == []
    here = report_tree["results"]
    assert files and all(h.endswith(".csv") and ":" not in h for h in files), files
    assert sorted({h for h in files if not (here / h).is_file()}) == []


def test_images_are_embedded_pngs(report_tree, dom):
    from PIL import Image

    imgs = list(dom.root.iter("img"))
    prefix = "data:image/png;base64,"
    drawn = {p.stem: p.read_bytes() for p in (report_tree["results"] / "figures").glob("*.png")}
    seen = set()
    for img in imgs:
        src = img.attrs.get("src", "")
        assert src.startswith(prefix), src[:60]
        data = base64.b64decode(src[len(prefix) :], validate=True)
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        with Image.open(io.BytesIO(data)) as im:
            im.verify()
        with Image.open(io.BytesIO(data)) as im:
            assert im.size[0] > 100 and im.size[1] > 100
        assert img.attrs.get("alt"), "every figure has alt text"
        seen |= {name for name, png in drawn.items() if png == data}
    assert len(imgs) == len(seen) == len(drawn), f"figures drawn but not on the page: {sorted(set(drawn) - seen)}"


def test_self_contained(report_tree, dom):
    # No address at all, but in the dump of the configuration (free text a user may write a link into) and
    # in the output of `dvc status` (the checkout's, not the page's).
    html = re.sub(r"<details>.*?</details>|<tr><th>DVC status</th>.*?</tr>", "", report_tree["html"], flags=re.S)
    assert not re.search(r"https?://", html, re.I), re.findall(r".{40}https?://.{40}", html)[:3]
    for tag in ("script", "link", "iframe", "object", "embed", "base", "form", "video", "audio", "source"):
        assert dom.root.find(tag) is None, f"<{tag}> on the page"
    for node in dom.root.iter():
        for attr in ("src", "href", "srcset", "action", "poster", "data", "background", "formaction"):
            v = node.attrs.get(attr)
            data_file = attr == "href" and node.tag == "a" and re.fullmatch(r"[\w./-]+\.csv", v or "") and ".." not in v
            assert v is None or v.startswith(("#", "data:")) or data_file, (node.tag, attr, v[:80])
        assert not any(a.startswith("on") for a in node.attrs), (node.tag, node.attrs)
    styles = [s.text() for s in dom.root.iter("style")] + [
        n.attrs["style"] for n in dom.root.iter() if "style" in n.attrs
    ]
    assert len(styles) >= 1 and dom.root.find("head").find("style") is not None, "CSS is inline"
    for css in styles:
        assert "@import" not in css and not re.search(r"url\(\s*['\"]?(?!data:)", css), css[:200]


def test_autoescaped(report_tree, dom):
    html = report_tree["html"]
    assert "<script" not in html and "<b>bold</b>" not in html and "<img src=x" not in html
    # The description is in the configuration block, as text; the alert message is in alerts.csv, not on the page.
    assert INJECTED in dom.root.find("section", id="repro").find("details").text()
    assert "&lt;script&gt;alert(" in html and "onerror=alert(2)" not in html
    assert not any(img.attrs.get("src") == "x" for img in dom.root.iter("img"))


# ---------------------------------------------------------------------------------------
# The numbers are the CSVs' numbers


def test_tables_equal_csvs(report_tree, dom):
    """Every table the `table()` helper renders from an aggregated CSV: its cells are the CSV's
    values formatted as the template asks, and it sits in its study's section."""
    html = report_tree["html"]
    tables_dir = report_tree["results"] / "tables"
    csvs = {p.stem: pd.read_csv(p) for p in tables_dir.glob("*.csv") if p.stat().st_size > 1}
    seen: dict[str, set] = {}
    for call in report_tree["tables_called"]:
        df = call["df"]
        names = [n for n, c in csvs.items() if df is not None and not df.empty and c.equals(df)]
        if not names:
            continue  # a frame the study derived from its tables (or an empty one)
        name = names[0]
        c = csvs[name]
        columns = call["columns"] if call["columns"] is not None else list(c.columns)
        headers = columns if isinstance(columns, dict) else {k: k for k in columns}
        assert set(headers) <= set(c.columns), (
            f"{name}: the template asks for columns the CSV lacks: {set(headers) - set(c.columns)}"
        )
        fragment = html_table(c, columns, call["formats"], call["caption"])
        sid = next(s for s in SECTIONS if fragment in section_html(html, s))  # StopIteration: not on the page
        seen.setdefault(sid, set()).add(name)
        # Cell by cell, independently of html_table: parse the fragment, format the CSV.
        table = Dom(str(fragment)).root.find("table")
        head, rows = table_cells(table)
        assert head == list(headers.values()), name
        assert len(rows) == len(c), name
        for i, row in enumerate(rows):
            want = [expected_text(c[col].iloc[i], call["formats"].get(col)) for col in headers]
            assert row == want, f"{name} row {i}"
    for sid, names in REQUIRED_TABLES.items():
        assert names <= seen.get(sid, set()), (
            f"{sid}: not rendered from their CSV: {sorted(names - seen.get(sid, set()))}"
        )


def test_some_numbers_by_hand(report_tree, dom):
    """A few cells located on the page by their headers, against the CSV."""
    b = csv(report_tree, "stability_batch")
    sec = dom.root.find("section", id="stability")
    tables = [table_cells(t) for t in sec.iter("table")]
    head, rows = next((h, r) for h, r in tables if h[:4] == ["batch", "LR", "n", "of"] and "roughness" in h)
    for i, r in enumerate(rows):
        assert r[0] == str(b["batch_size"].iloc[i]) and r[head.index("final acc.")] == pct(b["final_eval_mean"].iloc[i])
        assert r[head.index("n")] == str(b["n"].iloc[i]) and r[head.index("of")] == str(b["expected"].iloc[i])
    n512 = rows[[r[0] for r in rows].index("512")]
    assert n512[2:4] == ["1", "2"]  # the missing seed is counted out, not invented
    s = csv(report_tree, "system_results")
    sec = dom.root.find("section", id="system")
    head, rows = next(
        table_cells(t) for t in sec.iter("table") if table_cells(t)[0][:3] == ["task", "start", "algorithm"]
    )
    mul = next(r for r in rows if r[:3] == ["mul", "start_30", "reinforce"])  # from the warm-up's band
    want = s[(s.task == "mul") & (s.start == "start_30") & (s.algorithm == "reinforce")].iloc[0]
    assert mul[head.index("n")] == "1" and want["n"] == 1 and mul[head.index("planned")] == "2"
    assert (
        mul[head.index("final")] == pct(want["final_eval_mean"]) and mul[head.index("95% from")] == "–"
    )  # one run: no interval


def test_sentences_show_measured_values_not_placeholders(report_tree, dom):
    """Where every run has a result, no sentence prints a dash for a mean or an n: lab 04's normal
    setting also holds the calibration's `reference` role and is found all the same."""
    lab04 = dom.root.find("section", id="lab04").text()
    assert "– ± –" not in lab04 and "n=– of –" not in lab04
    assert re.search(r"under the normal one \(n=2 of 2;", lab04)
    system = dom.root.find("section", id="system")
    head, rows = next(table_cells(t) for t in system.iter("table") if table_cells(t)[0][:1] == ["setting"])
    micro = next(r for r in rows if r[0] == "sequences per micro-batch")
    assert micro[head.index("add: ours")] not in ("0", "–")  # micro_batch_size 0 means the whole batch


def test_the_run_index_is_a_linked_file_and_the_page_sums_it_up(report_tree, dom):
    """The run index is runs.csv beside the page, one row per run the config expands into; the page gives its counts
    per experiment and marks the runs without a result."""
    runs = pd.read_csv(report_tree["results"] / "tables" / "runs.csv")
    assert set(runs["run_id"]) == set(report_tree["experiments"])
    status = dict(zip(runs["run_id"], runs["status"]))
    assert status[report_tree["missing"]] == "missing" and status[report_tree["unreadable"]] == "unreadable"
    assert status[report_tree["stopped"]] == "stopped_nonfinite"
    sec = dom.root.find("section", id="runs")
    assert sec.find("a", href="tables/runs.csv") is not None and f"expands into {len(runs)} runs" in sec.text()
    table = next(t for t in sec.iter("table") if table_cells(t)[0][:1] == ["experiment"])
    head, rows = table_cells(table)
    by = {r[0]: dict(zip(head, r)) for r in rows}
    assert set(by) == set(runs["experiment"])
    own = runs["same_as"].isna()
    for exp, g in runs.groupby("experiment"):
        mine = g[own.loc[g.index]]
        assert by[exp]["runs"] == str(len(g)) and by[exp]["trained here"] == str(len(mine)), exp
        assert by[exp]["without result"] == str(int(mine["status"].isin(["missing", "unreadable", "stale"]).sum())), exp
        assert by[exp]["stopped by the guard"] == str(int(mine["status"].str.startswith("stopped").sum())), exp
    banner = dom.root.find("main").find("p", **{"class": "missing"})
    assert banner is not None and "2 run(s) are missing, unreadable or stale" in banner.text()
    assert dom.root.find("tr", id=f"run-{runs['run_id'].iloc[0]}") is None  # no row per run on the page


def test_the_alerts_are_a_linked_file_summed_up_by_kind(report_tree, dom):
    alerts = csv(report_tree, "alerts")
    sec = dom.root.find("section", id="alerts")
    assert sec.find("a", href="tables/alerts.csv") is not None
    head, rows = table_cells(sec.find("table"))
    counts = alerts.groupby("kind").agg(alerts=("run_id", "size"), runs=("run_id", "nunique"))
    assert {r[0]: (int(r[1]), int(r[2])) for r in rows} == {k: (a, n) for k, a, n in counts.itertuples()}
    assert INJECTED_ALERT not in sec.text()  # the messages are in the file


def test_data_files_are_linked_with_their_rows_and_every_column_described(report_tree, dom):
    from mathrl.analysis import datafiles
    from mathrl.analysis.study_inputs import Tables

    sec = dom.root.find("section", id="data")
    head, rows = table_cells(sec.find("table"))
    listed = {r[0]: int(r[3].replace(",", "")) for r in rows}
    for name in ("runs", "alerts", "claims", "run_measures", "diagnostics_entropy_law", "diagnostics_update"):
        assert listed[f"{name}.csv"] == len(csv(report_tree, name)), name
        assert sec.find("a", href=f"tables/{name}.csv") is not None
    files = datafiles.listing(Tables(report_tree["cfg"]), "tables")
    assert datafiles.undescribed(files) == {}
    assert len(sec.iter("details").__next__().find("dl").children) > 0


def test_an_unreadable_run_is_named_by_path_in_the_report(report_tree, dom):
    path = report_tree["results"] / "runs" / report_tree["unreadable"] / "summary.json"
    box = dom.root.find("section", id="runs").find("div", id="unreadable")
    assert box is not None and "1 run(s) have files that do not read whole" in box.text()
    assert dom.root.find("main").find("a", href="#unreadable") is not None  # the banner at the top links it
    assert [li.text() for li in box.iter("li")] == [
        f"{path}: cut short or damaged: it does not read as JSON (Expecting property name enclosed in double quotes: "
        f"line 1 column 2 (char 1)); remove {path.parent} (or `snakemake --forcerun`) to train the run again"
    ]


def test_missing_and_unreadable_runs_in_study_tables(report_tree, dom):
    """The missing batch seed and the unreadable system seed are counted out where their study counts runs."""
    sr = csv(report_tree, "system_results").set_index(["task", "start", "algorithm"])
    assert (
        sr.loc[("mul", "start_30", "reinforce"), "n"] == 1 and sr.loc[("mul", "start_30", "reinforce"), "n_runs"] == 2
    )
    sb = csv(report_tree, "stability_batch").set_index("batch_size")
    assert sb.loc[512, "n"] == 1 and sb.loc[512, "expected"] == 2


def test_every_verdict_is_printed_once_with_its_source(report_tree, dom):
    """Each claim of claims.csv is printed once, under the id claim-CLAIM_ID, in its section, with its outcome, its
    measured difference and its source; a verdicts table's row is claims.csv's; the opening counts are its counts."""
    from mathrl.analysis.verdict import OUTCOMES, interval_numbers, number

    claims = csv(report_tree, "claims")
    html = report_tree["html"]
    for r in claims.itertuples():
        assert html.count(f'id="claim-{r.claim_id}"') == 1, r.claim_id
        node = dom.root.find(None, id=f"claim-{r.claim_id}")
        assert node is not None and r.outcome in OUTCOMES and r.outcome in node.text(), r.claim_id
        assert r.source in node.text() and r.statement in node.text(), r.claim_id
        section = node.parent
        while section.tag != "section":
            section = section.parent
        assert section.attrs["id"] == r.section, r.claim_id
        if node.tag == "tr":
            cells = [td.text() for td in node.iter("td")]
            assert (
                cells[-2] == r.outcome
                and cells[5] == f"[{number(py(r.ci_low), r.unit)}, {number(py(r.ci_high), r.unit)}]"
            )
            assert cells[6].startswith(str(int(r.n))), r.claim_id
        elif r.outcome != "not judged" and r.ci_high > r.ci_low:  # a block: its first line gives the interval
            x, lo, hi = interval_numbers(py(r.difference), py(r.ci_low), py(r.ci_high), r.unit)
            assert f"{x} [{lo}, {hi}]" in node.find("p").text(), r.claim_id
        assert node.text().count("Checks:") <= 1, r.claim_id  # the checks are said once, in the verdict
    head, rows = table_cells(dom.root.find("section", id="claims").find("table"))
    counts = claims.groupby(["kind", "outcome"]).size()
    for row in rows:
        assert int(row[-1].replace(",", "")) == int(counts.loc[row[0]].sum()), row
    assert {"p_value", "p_holm", "p_bh", "failure_established", "engaged"} <= set(claims.columns)
    assert claims.loc[claims["kind"] != "document", "p_holm"].isna().all()
    doc = claims[claims["kind"] == "document"]
    decided = int(doc["outcome"].isin(["agrees", "disagrees"]).sum())
    text = " ".join(dom.root.find("section", id="claims").text().split())
    assert f"{decided} of the {len(doc)} document claims are decided under Benjamini-Hochberg" in text
    assert "under Holm's adjustment" in text


def test_the_first_screen_states_the_question_and_the_tally_then_the_coverage_table(report_tree, dom):
    claims = csv(report_tree, "claims")
    doc = claims[claims["kind"] == "document"]
    findings = dom.root.find("section", id="findings")
    text = findings.text()
    counts = doc["outcome"].value_counts()
    want = (
        f"Of the {len(doc)} claims of the documents this run tests, {counts.get('agrees', 0)} agree with the "
        f"measurements, {counts.get('disagrees', 0)} disagree, {counts.get('inconclusive', 0)} are inconclusive and "
        f"{counts.get('not judged', 0)} could not be judged"
    )
    assert want in text
    assert "The question:" in dom.root.find("main").find("p", **{"class": "question"}).text()
    sections = [n.attrs.get("id") for n in dom.root.iter("section")]
    assert sections.index("findings") == 0 and sections.index("coverage") == 1


def test_every_document_claim_appears_in_the_coverage_table_with_its_sentence(report_tree, dom):
    """Each document claim is named on a row of coverage.csv that quotes the document's sentence with its
    translation, its outcome linked to its verdict."""
    claims, coverage = csv(report_tree, "claims"), csv(report_tree, "coverage")
    sec = dom.root.find("section", id="coverage")
    for r in claims[claims["kind"] == "document"].itertuples():
        li = sec.find("li", id=f"cov-{r.claim_id}")
        assert li is not None, r.claim_id
        assert li.find("a").attrs["href"] == f"#claim-{r.claim_id}" and r.outcome in li.text()
        row = " ".join(li.parent.parent.parent.text().split())  # li < ul < td < tr
        names = coverage["claim_ids"].fillna("").str.split(";")
        quoted = coverage[[r.claim_id in ids for ids in names]]
        assert len(quoted) and " ".join(quoted["translation"].iloc[0].split()) in row, r.claim_id
    documents = [h.text() for h in sec.iter("h3")]
    assert documents == sorted(documents) and len(documents) == 4


def test_the_page_is_under_two_megabytes(report_tree):
    assert (report_tree["results"] / "report.html").stat().st_size < 2_000_000


def test_reproducibility_section(report_tree, dom):
    sec = dom.root.find("section", id="repro")
    text = sec.text()
    for word in ("git commit", "config hash", "torch", "pandas", "DVC status"):
        assert word in text
    assert "No benchmark files under" in text  # the synthetic tree was not built by Snakemake
    assert "runs trained on" in text and "not recorded" in text  # synthetic summaries record no CPU
    cfg_block = sec.find("details").find("pre").text()
    assert report_tree["cfg"]["results"] in cfg_block and "lab04_gpt" in cfg_block


def test_run_machines_counts_the_trained_runs_by_cpu_and_kernels():
    from mathrl.analysis.report import run_machines

    runs = pd.DataFrame({
        "run_id": list("abcdef"), "status": ["complete"] * 4 + ["missing", "complete"],
        "same_as": ["", "", "", "", "", "a"], "cpu": ["EPYC", "EPYC", "Xeon", "", "EPYC", "EPYC"],
        "cpu_kernels": ["AVX2", "AVX2", "AVX512", None, "AVX2", "AVX2"],
    })  # fmt: skip
    assert run_machines(runs) == [
        {"cpu": "EPYC", "cpu_kernels": "AVX2", "runs": 2},  # not the missing run, nor the one read twice
        {"cpu": "Xeon", "cpu_kernels": "AVX512", "runs": 1},
        {"cpu": "not recorded", "cpu_kernels": "not recorded", "runs": 1},
    ]
    assert run_machines(runs[runs["status"].eq("missing")]) == []


def test_empty_tree_renders(tmp_path):
    """Nothing run yet and no figure drawn: the page still renders, every run marked missing."""
    from mathrl.pipeline.cli import main

    path = make_config(tmp_path)
    for command in ("aggregate", "report"):
        assert main([command, "--config", str(path)]) == 0, command
    html = (tmp_path / "results" / "report.html").read_text()
    d = Dom(html)
    assert d.errors == [] and [n.attrs.get("id") for n in d.root.iter("section")] == SECTIONS
    assert d.root.find("img") is None and "was not drawn" in html
    runs = pd.read_csv(tmp_path / "results" / "tables" / "runs.csv")
    assert runs["status"].eq("missing").all()
    trained = runs["same_as"].isna().sum()  # a run read by a second experiment is counted once
    assert (
        0 < trained < len(runs)
        and f"{trained} run(s) are missing, unreadable or stale"
        in d.root.find("main").find("p", **{"class": "missing"}).text()
    )
    head, rows = table_cells(d.root.find("section", id="runs").find("table"))
    assert {r[0]: r[head.index("complete")] for r in rows} == dict.fromkeys(runs["experiment"], "0")


@pytest.mark.parametrize("experiment, old, new",
                         [("fixed_vs_dynamic", "A_fixed_512", "A_big_batch"), ("collapse", "huge_lr", "overflow"),
                                                  ("lab04_gpt", "kl_failing", "kl_fails")])  # fmt: skip
def test_renamed_variant_fails_naming_the_role(tmp_path, capsys, experiment, old, new):
    """Renaming a variant without its role is an error naming the experiment and the role (exit 2,
    no traceback); renaming both keeps the study's tables filled."""
    from mathrl.pipeline.cli import main

    path = make_config(tmp_path)
    d = yaml.safe_load(path.read_text())
    exp = d["experiments"][experiment]
    exp["variants"][new] = exp["variants"].pop(old)
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    assert main(["aggregate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    role = next(r for r, v in exp["roles"].items() if v == old)
    assert f"experiments.{experiment}.roles.{role}: '{old}' is not a variant" in err and "Traceback" not in err
    exp["roles"] = {r: new if v == old else v for r, v in exp["roles"].items()}  # every role the variant plays
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    assert main(["aggregate", "--config", str(path)]) == 0


def test_seeds_a_claim_needs_print_as_the_verdicts_say_them():
    from mathrl.analysis.report import cell

    assert (
        cell(12.0, "seeds") == "12" and cell(1001.0, "seeds") == "more than 1000" and cell(float("nan"), "seeds") == "–"
    )


def test_a_documents_scale_tree_sets_its_outcomes_beside_this_one(report_tree, tmp_path, capsys):
    """`mathrl report --full-results DIR`: the coverage table gains the documents'-scale column, marking the claims
    whose outcome differs there, and the scale headline and limitation say how many; a directory without claims.csv
    is refused (exit 2) before anything is written."""
    from mathrl.pipeline.cli import main

    claims = csv(report_tree, "claims")
    doc = claims[claims["kind"] == "document"]
    flipped = doc[doc["outcome"] == "inconclusive"]["claim_id"].head(2).tolist()
    full = tmp_path / "full"
    (full / "tables").mkdir(parents=True)
    claims.assign(outcome=claims["outcome"].where(~claims["claim_id"].isin(flipped), "agrees")).to_csv(
        full / "tables" / "claims.csv", index=False
    )
    out = report_tree["results"] / "report-full.html"
    assert main(["report", "--config", str(report_tree["config"]), "--out", str(out), "--full-results", str(full)]) == 0
    d = Dom(out.read_text())
    sec = d.root.find("section", id="coverage")
    assert "documents' scale" in [th.text() for th in sec.iter("th")]
    marked = [li for li in sec.iter("li") if "differs" in li.attrs.get("class", "")]
    assert len(marked) == len(flipped) == 2 and all(li.text() == "agrees" for li in marked)
    judged = claims["outcome"].isin(["agrees", "disagrees", "inconclusive"])
    findings = d.root.find("section", id="findings").text()
    assert f"At the documents' scale, 2 of the {int(judged.sum())} claims judged in both trees change" in findings
    assert (
        f"2 of the {int(judged.sum())} claims judged in both change their outcome"
        in d.root.find("section", id="limitations").text()
    )
    missing = tmp_path / "nothing"
    gone = tmp_path / "not-written.html"
    args = ["report", "--config", str(report_tree["config"]), "--out", str(gone), "--full-results", str(missing)]
    assert main(args) == 2 and not gone.exists()
    assert f"--full-results {missing}: no {missing}/tables/claims.csv" in capsys.readouterr().err
    out.unlink()
