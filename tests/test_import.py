"""Other frameworks' logs: the readers (mathrl.analysis.logs), `mathrl import` (mathrl.analysis.imported) and what it
refuses.

The TRL logs are real runs and the verl console log is a real PPO run's, taken unaltered from a public repository
(tests/fixtures/logs/README.md); verl's TensorBoard tags and a few console lines are written here in the layout of
verl's own writers, since no verl run could be made on this machine."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from mathrl.analysis import logs
from mathrl.analysis.imported import MONITOR, arm_alerts, by_names, reward_flat, run_alerts
from mathrl.pipeline.cli import main
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "logs"
TRL = FIXTURES / "trl"
ARMS = ROOT / "config" / "examples" / "trl_arms.yaml"
VERL = FIXTURES / "verl"
(VERL_LOG,) = (VERL / "qwen05b_gsm8k_ppo").glob("*.log")


# ----------------------------------------------------------------------------- readers
def test_values_as_frameworks_print_them():
    assert logs.number("np.float64(0.25)") == 0.25 and logs.number("tensor(1.5)") == 1.5
    assert logs.number("3") == 3.0 and logs.number(2) == 2.0 and math.isnan(logs.number("nan"))
    assert logs.number(True) is None and logs.number("abc") is None and logs.number(None) is None


def test_verl_console_lines_with_the_ray_prefix_and_a_half_written_last_line(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(
        "Training Progress:  0%|          | 0/3\n"
        "\x1b[36m(TaskRunner pid=3165)\x1b[0m step:1 - actor/entropy:0.5 - critic/score/mean:0.25 - "
        "actor/lr:np.float64(1e-06) - val-core/openai/gsm8k/reward/mean@1:0.4 - my/custom:7\n"
        "step:2 - actor/entropy:0.4 - critic/score/mean:np.float64(0.5) - actor/pg_clipfrac:0.01\n"
        "step:3 - actor/entropy:0.3 - critic/score/me"
    )
    (log,) = logs.read(path)
    assert log.format == "verl_console" and sorted(log.records) == [1, 2]
    assert log.records[1] == {
        "actor/entropy": 0.5,
        "critic/score/mean": 0.25,
        "actor/lr": 1e-06,
        "val-core/openai/gsm8k/reward/mean@1": 0.4,
        "my/custom": 7.0,
    }
    assert log.truncated == "its last line is incomplete"
    mapping = logs.columns(log.keys)
    assert mapping["entropy"] == "actor/entropy" and mapping["reward_mean"] == "critic/score/mean"
    assert (
        mapping["eval_accuracy"] == "val-core/openai/gsm8k/reward/mean@1"
        and mapping["clip_frac"] == "actor/pg_clipfrac"
    )
    m = logs.frame(log, mapping, ["step", "reward_mean", "kl"])
    assert list(m["reward_mean"]) == [0.25, 0.5] and m["kl"].isna().all()
    assert list(m["my/custom"].fillna(-1)) == [7.0, -1]  # an unknown key is kept under its own name


def verl_step_lines(text: str) -> dict[int, dict[str, str]]:
    """The file's step lines by step, as the eye reads them: Ray's colour codes and `(main_task pid=N)` prefix,
    then `step:N - key:value - key:value ...`; split on ` - `, not with the reader's patterns."""
    out = {}
    for line in text.split("\n"):
        found = re.match(r"(?:\x1b\[[0-9;]*m)*\(main_task pid=\d+\)(?:\x1b\[[0-9;]*m)* (step:\d+ - .*)$", line)
        if found:
            pairs = dict(pair.split(":", 1) for pair in found.group(1).split(" - "))
            out[int(pairs.pop("step"))] = pairs
    return out


def test_a_real_verl_console_log_is_read_step_by_step_with_its_validation():
    text = VERL_LOG.read_text(errors="replace")
    lines = verl_step_lines(text)
    assert len(lines) == len(re.findall(r" step:\d+ - ", text)) == 435 and sorted(lines) == list(range(435))
    (log,) = logs.read(VERL_LOG)
    assert log.format == "verl_console" and not log.truncated and sorted(log.records) == sorted(lines)
    for s in (0, 199, 434):
        assert all(log.records[s][k] == float(v) for k, v in lines[s].items()), s
    mapping = logs.columns(log.keys)
    assert {c: mapping[c] for c in ("reward_mean", "entropy", "ppo_kl", "clip_frac", "grad_norm", "lr")} == {
        "reward_mean": "critic/score/mean",
        "entropy": "actor/entropy_loss",
        "ppo_kl": "actor/ppo_kl",
        "clip_frac": "actor/pg_clipfrac",
        "grad_norm": "actor/grad_norm",
        "lr": "actor/lr(1e-4)",
    }
    assert mapping["response_length"] == "response_length/mean"
    assert mapping["eval_accuracy"] == "val/test_score/openai/gsm8k"
    m = logs.frame(log, mapping, ["step", "reward_mean", "entropy", "lr", "eval_accuracy"]).set_index("step")
    assert m.loc[0, "reward_mean"] == float(lines[0]["critic/score/mean"]) == 0.004
    assert m.loc[0, "entropy"] == float(lines[0]["actor/entropy_loss"])
    assert lines[0]["actor/lr(1e-4)"] == "0.010" and (m["lr"] == 1e-6).all()  # logged in units of 1e-4
    # validation: in the step lines every 10 steps, and the trainer's dicts before and after training
    key = "val/test_score/openai/gsm8k"
    tested = {s: float(pairs[key]) for s, pairs in lines.items() if key in pairs}
    assert sorted(tested) == list(range(9, 435, 10))
    initial = re.search(r"Initial validation metrics: \{'test_score/openai/gsm8k': ([\d.]+)\}", text).group(1)
    final = re.search(r"Final validation metrics: \{'test_score/openai/gsm8k': ([\d.]+)\}", text).group(1)
    evals = m["eval_accuracy"].dropna()
    assert evals.to_dict() == {0: float(initial), **tested, 434: float(final)}
    assert evals[0] == 0.0 and evals[434] == pytest.approx(0.519, abs=5e-4) and evals.max() == 0.538
    # every key of the step lines the mapping does not read is kept under its own name
    keys = set().union(*lines.values())
    unmapped = keys - set(mapping.values())
    assert set(m.columns) - set(mapping) == unmapped and len(unmapped) == 30
    assert {"critic/rewards/mean", "critic/lr(1e-4)", "timing/gen", "prompt_length/mean"} <= unmapped


def test_a_real_verl_console_log_cut_mid_line_is_read_to_its_last_whole_step(tmp_path):
    text = VERL_LOG.read_text(errors="replace")
    whole = logs.read(VERL_LOG)[0].records
    cut = tmp_path / "train.log"
    cut.write_text(text[: text.index("step:200 - ") + 300])  # inside step 200's line
    (log,) = logs.read(cut)
    assert log.truncated == "its last line is incomplete" and sorted(log.records) == list(range(200))
    assert all(log.records[s] == whole[s] for s in log.records)
    cut.write_text(text[: text.index("Final validation") + 30])  # inside the validation after training
    (log,) = logs.read(cut)
    assert log.truncated and max(log.records) == 434 and log.records[434] != whole[434]
    assert "val/test_score/openai/gsm8k" in whole[434] and "val/test_score/openai/gsm8k" not in log.records[434]


def test_jsonl_stops_at_a_half_written_last_line(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"step": 1, "reward": 0.1}\n{"step": 2, "reward": 0.2, "note": "text"}\n{"step": 3, "rew')
    (log,) = logs.read(path)
    assert log.records == {1: {"reward": 0.1}, 2: {"reward": 0.2}} and log.truncated


def test_a_trainer_state_cut_inside_its_history_is_read_to_its_last_whole_record(tmp_path):
    text = (TRL / "baseline_s0" / "checkpoint-30" / "trainer_state.json").read_text()
    whole = logs.read_trl_state(TRL / "baseline_s0" / "checkpoint-30" / "trainer_state.json")
    cut = tmp_path / "trainer_state.json"
    cut.write_text(text[: text.index('"step": 12') + 5])  # inside the record of step 12
    part = logs.read_trl_state(cut)
    assert part.truncated and max(part.records) == 11
    assert all(part.records[s] == whole.records[s] for s in part.records)


def test_the_same_trl_run_read_from_its_checkpoint_its_tensorboard_files_and_its_console():
    run = TRL / "aggressive_s0"
    state = logs.read(run / "checkpoint-30" / "trainer_state.json")[0]
    (board,) = logs.read(next((run / "runs").iterdir()))
    (console,) = logs.read(run / "train.log")
    assert (state.format, board.format, console.format) == ("trl_state", "tensorboard", "trl_console")
    for log in (state, board, console):
        mapping = logs.columns(log.keys)
        assert {"reward_mean", "entropy", "frac_zero_std", "clip_frac_low", "eval_accuracy"} <= set(mapping), log.source
        m = logs.frame(log, mapping, ["step", "reward_mean", "entropy"])
        assert len(m) == 30
    steps = [s for s in state.records if "reward" in state.records[s]]
    for s in steps:  # TensorBoard keeps float32, the console four significant digits
        assert board.records[s]["train/reward"] == pytest.approx(state.records[s]["reward"], rel=1e-6)
        assert console.records[s]["entropy"] == pytest.approx(state.records[s]["entropy"], rel=1e-3)
    assert board.records[5]["eval/reward"] == pytest.approx(state.records[5]["eval_reward"], rel=1e-6)


def test_an_event_file_still_being_written_is_read_to_its_last_whole_record(tmp_path):
    (whole,) = list((TRL / "baseline_s0" / "runs").glob("*/events.out.tfevents.*"))
    (tmp_path / whole.name).write_bytes(whole.read_bytes()[:20000])
    (cut,) = logs.read(tmp_path)
    full = logs.read(whole.parent)[0]
    assert cut.truncated.endswith("ends inside a record") and not full.truncated
    assert 0 < len(cut.records) < len(full.records) and cut.records[3] == full.records[3]


def test_a_wandb_chart_export_gives_a_run_per_prefix():
    runs = logs.read(FIXTURES / "wandb" / "baseline.csv")
    assert [r.name for r in runs] == ["baseline_s0", "baseline_s1", "baseline_s2"]
    state = logs.read(TRL / "baseline_s1" / "checkpoint-30" / "trainer_state.json")[0]
    r = runs[1]
    assert any(k.endswith("__MIN") for k in r.ignored) and "train/reward" in r.keys
    assert r.records[7]["train/reward"] == pytest.approx(state.records[7]["reward"])
    assert logs.columns(r.keys)["reward_mean"] == "train/reward"


def tensorboard_folder(folder: Path, rows: dict[int, dict]) -> Path:
    """Event files as the TensorBoard trackers of verl and OpenRLHF write them: `add_scalar(key, value, step)`."""
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(str(folder))
    for step, data in rows.items():
        for key, value in data.items():
            writer.add_scalar(key, value, step)
    writer.close()
    return folder


def verl_rows(entropy_start: float, fall: float, steps: int = 12) -> dict[int, dict]:
    return {
        s: {
            "actor/entropy": entropy_start * (1 - fall * s / steps),
            "critic/score/mean": 0.1 + 0.02 * s,
            "actor/pg_clipfrac": 0.01,
            "actor/grad_norm": 1.0,
            "response_length/mean": 100.0 + s,
            "actor/kl_loss": 0.001 * s,
        }
        for s in range(1, steps + 1)
    }


def test_verl_tensorboard_folders_import_as_arms_and_seeds(tmp_path):
    logs_dir = tmp_path / "tensorboard_log" / "gsm8k"
    for seed in (0, 1, 2):
        tensorboard_folder(logs_dir / f"grpo_s{seed}", verl_rows(1.0, 0.1 + 0.01 * seed))
        tensorboard_folder(logs_dir / f"grpo_lr10x_s{seed}", verl_rows(1.0, 0.8 + 0.01 * seed))
    out = tmp_path / "set"
    assert main(["import", str(logs_dir), "--out", str(out)]) == 0
    sm = json.loads((out / "runs" / "grpo_lr10x__s1" / "summary.json").read_text())
    assert sm["framework"] == "verl" and sm["format"] == "tensorboard"
    assert sm["columns"]["entropy"] == "actor/entropy" and sm["columns"]["kl"] == "actor/kl_loss"
    m = pd.read_csv(out / "runs" / "grpo_lr10x__s1" / "metrics.csv")
    assert m["entropy"].iloc[-1] == pytest.approx(1 - 0.81, rel=1e-5) and m["eval_accuracy"].isna().all()
    kinds = pd.read_csv(out / "tables" / "imported_arm_alerts.csv").groupby("arm")["kind"].apply(set).to_dict()
    assert kinds == {"grpo_lr10x": {"arm_entropy_collapse"}}  # 0.81 of the start lost on average; 0.11 in grpo


def test_an_openrlhf_tensorboard_folder_imports_under_its_train_names(tmp_path):
    """OpenRLHF's PPO trainer writes its status to TensorBoard as `train/KEY`: those keys fill the contract's columns
    and name the framework."""
    rows = {
        s: {
            "train/reward": 0.1 * s,
            "train/entropy_loss": 2.0 - 0.1 * s,
            "train/kl": 0.01 * s,
            "train/policy_loss": -0.05,
            "train/actor_lr": 5e-7,
            "train/ppo_clip_ratio": 0.02,
            "train/response_length": 200.0 + s,
            "train/critic_loss": 0.3,
        }
        for s in range(1, 9)
    }
    tensorboard_folder(tmp_path / "logs" / "ppo_s0", rows)
    out = tmp_path / "set"
    assert main(["import", str(tmp_path / "logs"), "--out", str(out)]) == 0
    sm = json.loads((out / "runs" / "ppo__s0" / "summary.json").read_text())
    assert (sm["framework"], sm["format"], sm["steps"]) == ("openrlhf", "tensorboard", 8)
    assert {c: sm["columns"][c] for c in ("reward_mean", "entropy", "kl", "lr", "clip_frac", "value_loss")} == {
        "reward_mean": "train/reward",
        "entropy": "train/entropy_loss",
        "kl": "train/kl",
        "lr": "train/actor_lr",
        "clip_frac": "train/ppo_clip_ratio",
        "value_loss": "train/critic_loss",
    }
    m = pd.read_csv(out / "runs" / "ppo__s0" / "metrics.csv")
    assert m["reward_mean"].tolist() == pytest.approx([0.1 * s for s in range(1, 9)], rel=1e-6)
    assert m["entropy"].iloc[-1] == pytest.approx(1.2, rel=1e-6)


@pytest.mark.slow
def test_a_real_verl_log_to_a_report_with_the_monitors_alerts(tmp_path):
    assert main(["import", str(VERL), "--set", f"results={tmp_path}"]) == 0
    out = tmp_path / "imported" / "verl"
    (run,) = (out / "runs").iterdir()
    sm = json.loads((run / "summary.json").read_text())
    assert (sm["framework"], sm["format"], sm["steps"], sm["truncated"]) == ("verl", "verl_console", 435, "")
    assert sm["initial"]["eval_accuracy"] == 0.0 and sm["final"]["eval_accuracy"] == pytest.approx(0.519, abs=5e-4)
    assert sm["best"] == {"eval_accuracy": 0.538, "step": 199}
    assert len(sm["unmapped"]) == 30 and {"critic/rewards/mean", "timing/testing"} <= set(sm["unmapped"])
    m = pd.read_csv(run / "metrics.csv")
    assert len(m) == 435 and m["critic/rewards/mean"].notna().all()  # an unmapped key, kept in metrics.csv
    # the token entropy falls below half its start (the mean of the first 5 steps) for the first time at step 55
    lines = verl_step_lines(VERL_LOG.read_text(errors="replace"))
    entropy = pd.Series({s: float(pairs["actor/entropy_loss"]) for s, pairs in lines.items()})
    below = entropy[entropy < entropy.iloc[:5].mean() / 2]
    alerts = pd.read_csv(out / "tables" / "imported_alerts.csv")
    assert alerts.loc[alerts["kind"] == "low_entropy", "step"].min() == below.index[0] == 55
    assert set(alerts["kind"]) == {"low_entropy", "grad_norm_spike", "reward_swing"}
    html = (out / "report.html").read_text()
    for shown in ("low_entropy", "grad_norm_spike", "reward_swing", "entropy collapses fast", "verl_console", "86.8%"):
        assert shown in html, shown
    assert VERL_LOG.name in html and "data:image/png" in html and 'href="' in html
    assert not re.search(r'(src|href)="(https?:|//)', html) and "<script" not in html and "<link" not in html


# ----------------------------------------------------------------------------- grouping, the monitor
def test_arms_and_seeds_from_folder_names():
    assert by_names(["a/clip_s0", "clip-seed2", "base/3", "single"]) == {
        "a/clip_s0": ("clip", 0),
        "clip-seed2": ("clip", 2),
        "base/3": ("base", 3),
        "single": ("single", 0),
    }


def test_the_monitor_on_a_log_by_hand():
    # entropy 1.0 for 5 steps (the start), then 0.6, then 0.4: below half the start at step 7 only
    m = pd.DataFrame(
        {
            "step": range(1, 9),
            "entropy": [1, 1, 1, 1, 1, 0.6, 0.4, 0.45],
            "kl": [0.1] * 7 + [0.6],
            "reward_mean": [0.5] * 8,
            "grad_norm": [1.0] * 8,
            "frac_zero_std": [0.0] * 8,
        }
    )
    alerts = {(a["kind"], a["step"]) for a in run_alerts(m)}
    assert alerts == {("low_entropy", 7), ("high_kl", 8)}
    m.loc[3, "reward_mean"] = math.inf
    assert ("nonfinite", 4) in {(a["kind"], a["step"]) for a in run_alerts(m)}


def test_no_signal_fires_once_the_window_of_equal_reward_groups_is_full():
    w = MONITOR["window"]
    m = pd.DataFrame({"step": range(1, 2 * w + 1), "reward_mean": 0.0, "frac_zero_std": [0.5] * w + [1.0] * w})
    alerts = {a["kind"]: a for a in run_alerts(m)}
    assert set(alerts) == {"no_signal", "reward_flat"} and alerts["reward_flat"]["step"] == 2 * w  # 0 throughout
    alert = alerts["no_signal"]
    # the mean of the last w steps is 0.5 + 0.05 k after k steps at 1.0: it reaches 0.9 at k = 8
    assert alert["kind"] == "no_signal" and alert["step"] == w + 8


def test_a_reward_that_rises_beyond_its_noise_is_not_flat():
    steps = pd.Series(range(1, 10))
    # k = 3: first 0.1, 0.2, 0.3 against last 0.7, 0.8, 0.9: a rise of 0.6, two standard errors 2 * sqrt(0.02) = 0.28
    assert reward_flat(steps, pd.Series([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])) is None
    flat = reward_flat(steps, pd.Series([0.1, 0.5, 0.3, 0.4, 0.2, 0.6, 0.2, 0.5, 0.3]))
    assert flat["kind"] == "reward_flat" and flat["step"] == 9 and flat["value"] == pytest.approx(1 / 30)
    assert reward_flat(steps[:5], pd.Series([0.1] * 5)) is None  # under 9 rewards: k < 3, not judged


def test_arm_alerts_by_hand():
    rows = [
        {"variant": arm, "seed": s, "entropy_fall": fall, "reward_start": 0.1, "reward_end": r_end, "eval_change": ev}
        for arm, falls, r_end, ev in (
            ("base", [0.1, 0.2, 0.15], 0.5, 0.05),
            ("hot", [0.7, 0.8, 0.75], 0.5, 0.05),
            ("hack", [0.1, 0.2, 0.15], [0.6, 0.7, 0.8], [-0.1, -0.2, -0.15]),
        )
        for s, fall, r_end, ev in zip(range(3), falls, *(x if isinstance(x, list) else [x] * 3 for x in (r_end, ev)))
    ]
    found = {(a["arm"], a["kind"]) for a in arm_alerts(pd.DataFrame(rows), {"baseline": "base"})}
    assert found == {
        ("hot", "arm_entropy_collapse"),
        ("hot", "arm_entropy_below_reference"),
        ("hack", "arm_reward_hack"),
    }


# ----------------------------------------------------------------------------- refused
def _refused(capsys, args: list[str], out: Path, expect: str) -> str:
    assert main(["import", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(expect, err), err
    assert not out.exists()  # nothing written
    return err


def test_refused_an_unknown_format(tmp_path, capsys):
    (tmp_path / "weights.bin").write_bytes(b"\0\1")
    _refused(capsys, [str(tmp_path / "weights.bin")], tmp_path / "out", r"weights\.bin: no known log")


def test_refused_a_file_that_is_not_a_log(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("nothing here\n")
    _refused(capsys, [str(tmp_path / "notes.txt")], tmp_path / "out", r"notes\.txt: a console log with no")
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    _refused(capsys, [str(tmp_path / "table.csv")], tmp_path / "out", r"table\.csv: no step column")
    (tmp_path / "trainer_state.json").write_text('{"best_metric": null}')
    _refused(capsys, [str(tmp_path / "trainer_state.json")], tmp_path / "out", r"no log_history")


def test_refused_a_log_with_no_reward(tmp_path, capsys):
    (tmp_path / "run.jsonl").write_text('{"step": 1, "entropy": 0.5}\n{"step": 2, "entropy": 0.4}\n')
    _refused(capsys, [str(tmp_path / "run.jsonl")], tmp_path / "out", r"run\.jsonl: no reward logged")


def test_refused_two_runs_claiming_one_arm_and_seed(tmp_path, capsys):
    for parent in ("first", "second"):
        shutil.copytree(TRL / "baseline_s0", tmp_path / "logs" / parent / "baseline_s0")
    _refused(capsys, [str(tmp_path / "logs")], tmp_path / "out", r"claims arm baseline seed 0, as first/baseline_s0")


# ----------------------------------------------------------------------------- the guide's section
def guide_commands() -> list[str]:
    """The `mathrl` lines of the user guide's section on imported runs (docs/guide/own-runs.md)."""
    text = (ROOT / "docs" / "guide" / "own-runs.md").read_text()
    section = text[text.index("## Your own runs: TRL, verl, OpenRLHF") :]
    section = re.split(r"\n## ", section[10:])[0]
    block = re.findall(r"```bash\n(.*?)```", section, re.S)[0]
    return [line.split("#")[0].strip() for line in block.splitlines() if line.startswith("mathrl ")]


@pytest.mark.slow
def test_the_guide_takes_trl_checkpoints_to_a_report(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    commands = guide_commands()
    assert [c.split()[1] for c in commands] == ["import", "compare"]
    for command in commands:
        assert main([*command.split()[1:], "--set", f"results={tmp_path}"]) == 0, command
    printed = capsys.readouterr().out
    out = tmp_path / "imported" / "trl_clip"
    html = (out / "report.html").read_text()
    assert "arm_entropy_collapse" in html and "low_entropy" in html and 'href="' in html and "data:image/png" in html
    claims = pd.read_csv(out / "tables" / "claims.csv").set_index("claim_id")
    assert (
        claims.loc["aggressive_loses_entropy", "outcome"] == "agrees"
        and claims.loc["aggressive_loses_entropy", "n"] == 3
    )
    assert "aggressive - baseline" in printed and (out / "compare" / "trl_clip_entropy_end.csv").is_file()
    assert not re.search(r'(src|href)="(https?:|//)', html) and "<script" not in html and "<link" not in html


def test_refused_a_claim_on_no_measure_or_no_role(tmp_path, capsys):
    arms = tmp_path / "arms.yaml"
    base = "arms: {baseline: [baseline_s*], aggressive: [aggressive_s*]}\nroles: {baseline: baseline}\n"
    arms.write_text(base + "claims:\n  - {id: c, statement: s, measure: entropy_last, a: {variant: aggressive}}\n")
    _refused(capsys, [str(TRL), "--arms", str(arms)], tmp_path / "out", r"claim c: measure 'entropy_last' is not a")
    arms.write_text(base + "claims:\n  - {id: c, statement: s, measure: entropy_end, a: {role: candidate}}\n")
    _refused(capsys, [str(TRL), "--arms", str(arms)], tmp_path / "out", r"has no role 'candidate'")
    arms.write_text(base + "colour: blue\n")
    _refused(capsys, [str(TRL), "--arms", str(arms)], tmp_path / "out", r"unknown key\(s\) colour")
