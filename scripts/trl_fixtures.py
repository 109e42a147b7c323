"""Real TRL logs for the import tests: GRPOTrainer on a tiny model, a few steps a run, on the CPU.

Run inside a venv with TRL (pyproject's `trl` extra), not the project's:
    scripts/trl_fixtures.sh OUT     (makes the venv, then runs this with OUT)

Nothing is downloaded: the model is a two-layer Llama with random weights built from a config, the
tokenizer a word-level one built here over the task's words, the data set a list made here. The task:
`a + b =` with one-digit a, b and a < 5, b < 5; the reward is 1 when the first word of the completion is
the sum. Three arms, three seeds each, one GRPOTrainer run apiece (`OUT/trl/{arm}_s{seed}/`):

- `baseline`: two updates per batch (num_iterations 2, so the ratio moves and the clip can bind), the
  symmetric clip 0.2, lr 1e-3, no KL (beta 0);
- `clip_higher`: the same with TRL's epsilon_high 0.28 (DAPO's clip-higher);
- `aggressive`: lr 1e-1, on which token entropy collapses.

Each run keeps what a user has after training: `checkpoint-N/trainer_state.json` (the weights are deleted:
the tests need the logs), the TensorBoard event files transformers' callback writes (`runs/`), and the
Trainer's console (`train.log`). An evaluation every 5 steps logs `eval_reward`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil
import sys
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

WORDS = [str(d) for d in range(10)] + ["+", "="]
SPECIAL = ["<pad>", "<unk>", "<bos>", "<eos>"]
ARMS = {
    "baseline": {"learning_rate": 1e-3},
    "clip_higher": {"learning_rate": 1e-3, "epsilon_high": 0.28},
    "aggressive": {"learning_rate": 1e-1},
}
SEEDS = (0, 1, 2)
STEPS = 30


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", bos_token="<bos>", eos_token="<eos>"
    )
    fast.padding_side = "left"
    return fast


def model(tok, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return LlamaForCausalLM(cfg)


def data(split: str) -> Dataset:
    pairs = [(a, b) for a in range(5) for b in range(5)]
    pairs = pairs[::2] if split == "train" else pairs[1::2]
    return Dataset.from_list([{"prompt": f"{a} + {b} =", "answer": str(a + b)} for a, b in pairs])


def correct(completions, answer, **_) -> list[float]:
    """1 where the completion's first word is the sum."""
    return [float(c.split()[:1] == [a]) for c, a in zip(completions, answer)]


def train(out: Path, arm: str, seed: int) -> None:
    tok = tokenizer()
    run_dir = out / f"{arm}_s{seed}"
    args = GRPOConfig(
        output_dir=str(run_dir),
        seed=seed,
        max_steps=STEPS,
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=3,
        num_iterations=2,
        beta=0.0,
        temperature=1.0,
        logging_steps=1,
        save_steps=10,
        save_only_model=True,
        eval_strategy="steps",
        eval_steps=5,
        per_device_eval_batch_size=16,
        report_to=["tensorboard"],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        **ARMS[arm],
    )
    trainer = GRPOTrainer(
        model=model(tok, seed),
        reward_funcs=correct,
        args=args,
        train_dataset=data("train"),
        eval_dataset=data("eval"),
        processing_class=tok,
    )
    console = io.StringIO()
    with contextlib.redirect_stdout(console):
        trainer.train()
    (run_dir / "train.log").write_text(console.getvalue())
    (run_dir / "README.md").unlink(missing_ok=True)  # the model card
    for checkpoint in run_dir.glob("checkpoint-*"):  # keep the logs, not the weights
        for f in checkpoint.iterdir():
            if f.name != "trainer_state.json":
                shutil.rmtree(f) if f.is_dir() else f.unlink()
    print(f"{run_dir}: {sorted(p.name for p in run_dir.iterdir())}", flush=True)


def chart_csv(out: Path, arm: str, keys=("reward", "entropy", "kl", "frac_reward_zero_std")) -> Path:
    """An arm's runs as W&B's chart export lays them out (`Step`, then `RUN - train/KEY` with its `__MIN` and
    `__MAX` companions), from each run's trainer_state.json: W&B's "Export CSV" belongs to its web app, which no
    offline run reaches, so the layout is written here around the real runs' histories."""
    runs = sorted(out.glob(f"{arm}_s*"))
    history = {}
    for run in runs:
        state = max(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
        history[run.name] = {r["step"]: r for r in json.loads(state.read_text())["log_history"] if "step" in r}
    columns = [f"{run} - train/{k}{suffix}" for run in history for k in keys for suffix in ("", "__MIN", "__MAX")]
    path = out / f"wandb_{arm}.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Step", *columns])
        for step in sorted({s for h in history.values() for s in h}):
            row = [step]
            for h in history.values():
                for k in keys:
                    v = h.get(step, {}).get(k, "")
                    row += [v, v, v]
            w.writerow(row)
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1]) / "trl"
    torch.set_num_threads(1)
    for arm in ARMS:
        for seed in SEEDS:
            train(out, arm, seed)
    print(chart_csv(out, "baseline"), flush=True)
