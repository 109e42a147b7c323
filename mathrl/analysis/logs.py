"""Training logs of other frameworks, read into the columns of metrics.csv.

The readers turn each log into one or more `Log`s: the per-step records (step -> {key: value}) of one run,
under the names the framework logged them, with the file they came from. Formats:

- `trl_state`: a Hugging Face Trainer's `trainer_state.json` (TRL's trainers write it into every
  `checkpoint-N/`): its `log_history`, training rows and evaluation rows (`eval_*`) by step;
- `trl_console`: the Trainer's console lines, one Python dict per logging step (`{'loss': 0.0, ...}`);
- `jsonl`: one JSON object per line with a step key (`step`, `global_step`, `_step`, ...);
- `tensorboard`: event files (`events.out.tfevents.*`), read with tensorboard's own event reader; verl,
  OpenRLHF and TRL (through transformers' callback) all write them;
- `verl_console`: verl's console logger, `step:N - key:value - key:value ...` (Ray's `(TaskRunner pid=..)`
  prefix and colour codes allowed, values as printed: `np.float64(0.5)`, `tensor(0.5)`), and the trainer's
  `Initial validation metrics: {...}` and `Final validation metrics: {...}` lines;
- `wandb_csv`: a Weights & Biases "Export CSV" of a run's history (`_step` or `Step`, then a column per
  key) or of a chart (`RUN - key` columns, with `__MIN`/`__MAX` companions, one run per prefix).

A run still being written may end in a half-written line: the readers stop at the last whole record
and say so (`Log.truncated`). `columns` then maps the framework's keys onto the contract's columns
(`COLUMN_KEYS`, first key found wins); every key it does not map is kept under its own name and listed
(`unmapped`), never dropped.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from mathrl.pipeline.errors import ConfigError

FORMATS = ("trl_state", "trl_console", "jsonl", "tensorboard", "verl_console", "wandb_csv")
STEP_KEYS = ("step", "global_step", "_step", "Step", "train/global_step", "training/global_step", "iteration")

# The contract's columns (and a few extras of metrics.csv) and the keys frameworks log them under, in the order
# they are tried: TRL's GRPOTrainer (grpo_trainer.py's metrics), verl (metric_utils.py, the actor and critic
# workers), OpenRLHF (its PPO trainer's status, written as `train/KEY` to TensorBoard), then our own names.
COLUMN_KEYS = {
    "reward_mean": ["reward", "critic/score/mean", "train/reward", "reward_mean"],
    "reward_std": ["reward_std", "critic/score/std", "reward_std"],
    "frac_zero_std": ["frac_reward_zero_std", "frac_zero_std"],
    "entropy": ["entropy", "actor/entropy", "actor/entropy_loss", "train/entropy_loss"],
    "kl": ["kl", "actor/kl_loss", "critic/kl", "train/kl"],
    "kl_coef": ["actor/kl_coef", "critic/kl_coeff", "kl_coef"],
    "grad_norm": ["grad_norm", "actor/grad_norm", "train/grad_norm"],
    "policy_loss": ["actor/pg_loss", "train/policy_loss", "policy_loss", "loss"],
    "value_loss": ["critic/vf_loss", "train/critic_loss", "value_loss"],
    "clip_frac": ["clip_ratio/region_mean", "actor/pg_clipfrac", "train/ppo_clip_ratio", "clip_frac"],
    "clip_frac_low": ["clip_ratio/low_mean", "clip_frac_low"],
    "clip_frac_high": ["clip_ratio/high_mean", "clip_frac_high"],
    "dual_clip_frac": ["actor/pg_clipfrac_lower", "dual_clip_frac"],
    "ppo_kl": ["actor/ppo_kl", "ppo_kl"],
    "explained_variance": ["critic/vf_explained_var", "explained_variance"],
    "lr": ["learning_rate", "actor/lr", "actor/lr(1e-4)", "train/actor_lr", "lr"],
    "response_length": ["completions/mean_length", "response_length/mean", "train/response_length", "response_length"],
    "eval_accuracy": [
        "eval_reward",
        "eval_accuracy",
        re.compile(r"val-core/.+/(acc|reward|score)/mean@1"),
        re.compile(r"val-core/.+/(acc|reward|score)/mean@\d+"),
        re.compile(r"val/test_score/.+"),
        re.compile(r"eval/eval_.+_pass1"),
    ],
}
REWARD_COLUMN = "reward_mean"
# A unit in a key's name: older verl versions log `actor/lr(1e-4)`, the learning rate times 1e4.
_UNIT = re.compile(r"\(1e-(\d+)\)$")


@dataclass
class Log:
    """One run's records as logged: {step: {key: value}}, where they came from and how."""

    source: str  # the file (or folder of event files), as given
    format: str
    name: str  # the run's name: its folder relative to the import root, or a chart's run prefix
    records: dict[int, dict[str, float]] = field(default_factory=dict)
    truncated: str = ""  # what was left out at the end of a file still being written
    ignored: list[str] = field(default_factory=list)  # keys that are no metric of a step (W&B's __MIN/__MAX)

    @property
    def keys(self) -> list[str]:
        return list(dict.fromkeys(k for row in self.records.values() for k in row))

    def add(self, step, values: dict) -> None:
        """Merge a record into its step (later writes win: a restarted run logs its steps again)."""
        self.records.setdefault(int(step), {}).update(values)


# ----------------------------------------------------------------------------- values
_WRAPPED = re.compile(r"^(?:np\.\w+|numpy\.\w+|tensor|torch\.tensor|float|int)\((.*?)(?:,\s*\w+=.*)?\)$")


def number(value) -> float | None:
    """A logged value as a float (None where it is no number: text, a list): `np.float64(0.5)`, `tensor(0.5)`,
    `nan` and `inf` as printed; booleans are no metric."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    inner = _WRAPPED.match(text)
    text = inner.group(1).strip() if inner else text
    try:
        return float(text)
    except ValueError:
        return None


def _numeric(record: dict) -> dict[str, float]:
    out = {}
    for key, value in record.items():
        x = number(value)
        if x is not None and str(key) not in STEP_KEYS:
            out[str(key)] = x
    return out


def _step_of(record: dict, path: Path, where: str) -> int:
    for key in STEP_KEYS:
        if key in record and number(record[key]) is not None:
            return int(number(record[key]))
    raise ConfigError(f"{path}: {where} has no step ({' or '.join(STEP_KEYS[:3])}); not a training log")


def _whole_lines(text: str) -> tuple[list[str], str]:
    """The file's lines but a last one without its newline (a writer mid-line), and that line."""
    lines = text.split("\n")
    return lines[:-1], lines[-1]


# ----------------------------------------------------------------------------- readers
def read_trl_state(path: Path) -> Log:
    """`trainer_state.json`: its `log_history` by step; a file cut short is read up to its last whole record."""
    text = path.read_text(errors="replace")
    log = Log(str(path), "trl_state", "")
    try:
        history = json.loads(text).get("log_history")
    except (ValueError, AttributeError):
        history, log.truncated = _salvage_history(text), "the file ends inside its log_history"
    if not isinstance(history, list):
        raise ConfigError(f"{path}: no log_history list; not a Trainer's trainer_state.json")
    for i, record in enumerate(history):
        if isinstance(record, dict) and "step" in record:
            log.add(_step_of(record, path, f"log_history[{i}]"), _numeric(record))
    return log


def _salvage_history(text: str) -> list:
    """The whole records of a `log_history` list in JSON text that breaks off inside it."""
    start = text.find('"log_history"')
    start = text.find("[", start) + 1 if start >= 0 else 0
    if start <= 0:
        return None
    decoder, out, i = json.JSONDecoder(), [], start
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        try:
            obj, i = decoder.raw_decode(text, i)
        except ValueError:
            return out
        out.append(obj)


def read_trl_console(path: Path) -> Log:
    """The Trainer's console: a Python dict literal per logged step (`{'loss': 0.1, ..., 'epoch': 0.5}`);
    other lines (progress bars, warnings) are skipped. The console prints no step: steps count the logged
    training lines (the Trainer's step where `logging_steps` is 1)."""
    lines, last = _whole_lines(path.read_text(errors="replace"))
    log = Log(str(path), "trl_console", "")
    dicts = [d for d in (_dict_in(line) for line in lines) if d]
    if last.strip() and _dict_in(last) is None and "{" in last:
        log.truncated = "its last line is incomplete"
    elif _dict_in(last):
        dicts.append(_dict_in(last))
    step = 0
    for record in dicts:  # an evaluation's or the run's closing dict belongs to the training step before it
        if not all(str(k).startswith(("eval_", "train_", "total_flos", "epoch")) for k in record) or not step:
            logged = next((number(record[k]) for k in STEP_KEYS if k in record), None)
            step = int(logged) if logged is not None else step + 1
        log.add(step, _numeric(record))
    return log


_DICT = re.compile(r"\{'[^{}]*\}")


def _dict_in(line: str) -> dict | None:
    found = _DICT.search(line.replace("\r", "\n").split("\n")[-1] if "\r" in line else line)
    if not found:
        return None
    try:
        value = ast.literal_eval(re.sub(r"(?<=[:\s])-?(nan|inf)\b", "None", found.group(0)))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def read_jsonl(path: Path) -> Log:
    """One JSON object per line, each with a step key."""
    lines, last = _whole_lines(path.read_text(errors="replace"))
    log = Log(str(path), "jsonl", "")
    if last.strip():
        try:
            lines.append(last) if isinstance(json.loads(last), dict) else None
        except ValueError:
            log.truncated = "its last line is incomplete"
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ConfigError(f"{path}: line {n} is not JSON; not a JSON-lines log") from None
        if isinstance(record, dict):
            log.add(_step_of(record, path, f"line {n}"), _numeric(record))
    return log


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VERL_PAIR = re.compile(r"(?:^|\s-\s)([^\s:][^:]*?):((?:np\.\w+|tensor)\([^)]*\)|[^\s]+)(?=\s-\s|\s*$)")
_VERL_VALIDATION = re.compile(r"(?:Initial|Final) validation metrics: (\{.*\})")
_DICT_PAIR = re.compile(r"'([^']+)':\s*((?:np\.\w+|tensor)\([^)]*\)|[^,}\s]+)")


def read_verl_console(path: Path) -> Log:
    """verl's console logger: `step:N - key:value - ...` on each line that has one. The trainer's validation
    before and after training (`Initial validation metrics: {...}`, `Final validation metrics: {...}`, printed
    as a dict) goes to the step logged last before it (0 when none was), under the `val/` name the trainer
    gives the same score inside its loop (older verl versions print `test_score/...` there and log
    `val/test_score/...` at their test steps)."""
    lines, last = _whole_lines(path.read_text(errors="replace"))
    log = Log(str(path), "verl_console", "")
    if last.strip():
        if "step:" in last or "validation metrics:" in last:
            log.truncated = "its last line is incomplete"
        else:
            lines.append(last)
    step = 0
    for line in lines:
        line = _ANSI.sub("", line)
        at = line.find("step:")
        if at >= 0 and re.match(r"step:\d+\s+-\s", line[at:]):
            pairs = dict(_VERL_PAIR.findall(line[at:]))
            step = int(pairs.pop("step"))
            log.add(step, _numeric(pairs))
            continue
        validation = _VERL_VALIDATION.search(line)
        if validation:
            pairs = _numeric(dict(_DICT_PAIR.findall(validation.group(1))))
            log.add(step, {(k if k.startswith("val") else f"val/{k}"): x for k, x in pairs.items()})
    return log


def read_wandb_csv(path: Path) -> list[Log]:
    """A W&B "Export CSV": a run's history (one run), or a chart's (a run per `RUN - ` prefix)."""
    lines, last = _whole_lines(path.read_text(errors="replace"))
    truncated = ""
    if last.strip():
        truncated = "its last line is incomplete"  # a CSV's last row always ends with a newline when whole
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        raise ConfigError(f"{path}: empty CSV; not a W&B export")
    header, body = rows[0], rows[1:]
    step_col = next((i for i, h in enumerate(header) if h in STEP_KEYS), None)
    if step_col is None:
        raise ConfigError(f"{path}: no step column ({', '.join(STEP_KEYS)}) in its header; not a W&B export")
    logs: dict[str, Log] = {}
    for i, name in enumerate(header):
        if i == step_col:
            continue
        run, sep, key = name.partition(" - ")
        run, key = (run, key) if sep else ("", name)
        log = logs.setdefault(run, Log(str(path), "wandb_csv", run, truncated=truncated))
        if key.endswith(("__MIN", "__MAX")) or key.startswith("_"):
            log.ignored.append(name)
            continue
        for row in body:
            x = number(row[i]) if i < len(row) and row[i] != "" else None
            if x is not None and number(row[step_col]) is not None:
                log.add(int(number(row[step_col])), {key: x})
    return list(logs.values())


def read_tensorboard(path: Path) -> Log:
    """Scalars of the event files in a folder (or one event file), with tensorboard's own reader; several files
    in one folder (a resumed run) are merged by step. A last record cut short is left out by the reader."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    files = sorted(path.glob("events.out.tfevents.*")) if path.is_dir() else [path]
    log = Log(str(path), "tensorboard", "")
    for file in files:
        try:
            events = list(EventFileLoader(str(file)).Load())
        except Exception as exc:  # noqa: BLE001 - the reader's own errors name what is wrong with the file
            raise ConfigError(f"{file}: not a TensorBoard event file ({type(exc).__name__}: {exc})") from None
        if _cut_short(file):
            log.truncated = f"{file.name} ends inside a record"
        for event in events:
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    log.add(event.step, {value.tag: float(value.simple_value)})
                elif value.HasField("tensor") and value.metadata.plugin_data.plugin_name in ("scalars", ""):
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size == 1 and array.dtype.kind in "fiu":
                        log.add(event.step, {value.tag: float(array.reshape(-1)[0])})
    return log


def _cut_short(file: Path) -> bool:
    """Whether an event file ends inside a record (a writer mid-record): its records' framing (a little-endian
    8-byte length, then a 4-byte checksum, the data and another 4-byte checksum) does not end at the file's end."""
    data, at = file.read_bytes(), 0
    while at + 12 <= len(data):
        at += 16 + int.from_bytes(data[at : at + 8], "little")
    return at != len(data)


# ----------------------------------------------------------------------------- formats
def guess_format(path: Path) -> str | None:
    """The format of a log file or folder from its name and first bytes; None for no log this module reads."""
    name = path.name
    if path.is_dir():
        return "tensorboard" if any(path.glob("events.out.tfevents.*")) else None
    if name.startswith("events.out.tfevents."):
        return "tensorboard"
    if name == "trainer_state.json":
        return "trl_state"
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "wandb_csv"
    if suffix in (".log", ".txt", ".out", ".err"):
        head = path.read_text(errors="replace")[:200_000]
        if re.search(r"step:\d+\s+-\s", head):
            return "verl_console"
        if _DICT.search(head):
            return "trl_console"
        return "console"  # a console log with no records of a known framework: refused by `read`
    return None


def read(path: Path, fmt: str | None = None) -> list[Log]:
    """The runs of one log (a W&B chart export may hold several); an error names the file and what is wrong."""
    path = Path(path)
    fmt = fmt or guess_format(path)
    if fmt not in FORMATS:
        kind = "a console log with no `step:N - ` or `{'key': value}` lines" if fmt == "console" else "no known log"
        raise ConfigError(
            f"{path}: {kind}; readable formats: {', '.join(FORMATS)} (by name: trainer_state.json, "
            f"*.jsonl, events.out.tfevents.*, *.log/*.txt, *.csv)"
        )
    readers = {
        "trl_state": read_trl_state,
        "trl_console": read_trl_console,
        "jsonl": read_jsonl,
        "tensorboard": read_tensorboard,
        "verl_console": read_verl_console,
    }
    try:
        logs = read_wandb_csv(path) if fmt == "wandb_csv" else [readers[fmt](path)]
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    for log in logs:
        if not log.records:
            raise ConfigError(f"{path}: no step records in it (read as {fmt}); not a training log")
    return logs


# ----------------------------------------------------------------------------- columns
def _strip_train(key: str) -> str:
    """transformers' TensorBoard callback writes TRL's `reward` as `train/reward` and `eval_reward` as
    `eval/reward`: the names TRL logs, for the mapping."""
    if key.startswith("train/"):
        return key[len("train/") :]
    return "eval_" + key[len("eval/") :] if key.startswith("eval/") and not key.startswith("eval/eval_") else key


def columns(keys: list[str], chosen: dict[str, str] | None = None) -> dict[str, str]:
    """{column: the logged key it reads} for the keys of a log: the user's choice (`chosen`, column -> key)
    first, then COLUMN_KEYS' candidates in order, each key read by one column at most."""
    out, used = {}, set()
    plain = {k: _strip_train(k) for k in keys}
    for column, key in (chosen or {}).items():
        if key in keys:
            out[column], used = key, used | {key}
    for column, candidates in COLUMN_KEYS.items():
        if column in out:
            continue
        for candidate in candidates:
            hit = [k for k in keys if k not in used and _matches(candidate, k, plain[k])]
            if hit:
                out[column] = sorted(hit)[0]
                used.add(out[column])
                break
    return out


def _matches(candidate, key: str, plain: str) -> bool:
    if isinstance(candidate, re.Pattern):
        return bool(candidate.fullmatch(key) or candidate.fullmatch(plain))
    return key == candidate or plain == candidate


def per_unit(key: str) -> int:
    """How many of a key's logged units make one, from its name: 10**4 for `actor/lr(1e-4)`, else 1."""
    found = _UNIT.search(key)
    return 10 ** int(found.group(1)) if found else 1


def frame(log: Log, mapping: dict[str, str], contract: list[str]):
    """The log as metrics.csv's rows: `step`, the contract's columns (NaN where nothing maps; a key with a unit
    in its name, `actor/lr(1e-4)`, in plain units), the extra columns mapped, then every unmapped key under its
    own name, as logged."""
    import pandas as pd

    steps = sorted(log.records)
    data = {"step": steps}
    mapped = set(mapping.values())
    for column in dict.fromkeys([*contract, *mapping]):
        if column == "step":
            continue
        key = mapping.get(column)
        units = per_unit(key) if key else 1
        data[column] = [log.records[s].get(key, math.nan) / units if key else math.nan for s in steps]
    for key in log.keys:
        if key not in mapped and key not in data:
            data[key] = [log.records[s].get(key, math.nan) for s in steps]
    return pd.DataFrame(data)
