"""The arithmetic tasks: vocabulary, token layout, problem generation and problem files.

Token layout (the one place it is defined). The vocabulary is ``0123456789+*=$``: digit
``d`` has token id ``d``, ``+`` = 10, ``*`` = 11, ``=`` = 12 and ``$`` = 13 is the end
token. A problem ``a op b`` of a task with ``ndigit`` n is written

    prompt = zero-padded a, op, zero-padded b, '='           e.g. 007+045=   (2n+2 tokens)
    answer = result zero-padded to W digits, REVERSED, '$'    e.g. 2500$      (W+1 tokens)

with W = n+1 for addition and W = 2n for multiplication. Reversal puts the least
significant digit first, the order in which carries are computed; ``reverse=False``
writes it most significant first instead (an ablation knob). Every prompt of a task has
the same length and every answer W+1 tokens, so batches never need padding, and a
curriculum over fewer digits only narrows the operand range, never the width.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from mathrl.pipeline.atomic import atomic_write
from mathrl.pipeline.errors import ProblemFileError  # re-exported: callers import it from here

VOCAB: str = "0123456789+*=$"
VOCAB_SIZE: int = len(VOCAB)
stoi: dict[str, int] = {ch: i for i, ch in enumerate(VOCAB)}
itos: dict[int, str] = {i: ch for i, ch in enumerate(VOCAB)}
EQUALS: int = stoi["="]
END: int = stoi["$"]
MAX_NDIGIT = 9  # a 9-digit product has 18 digits: the widest answer that still fits int64
_RANDPERM_LIMIT = 10**7  # above this many pairs, sample with rejection instead of randperm


class Op(NamedTuple):
    symbol: str
    fn: Callable  # works on ints and on integer tensors alike


OPS: dict[str, Op] = {"add": Op("+", operator.add), "mul": Op("*", operator.mul)}


def encode(text: str) -> list[int]:
    """Token ids of ``text``; raises KeyError naming a character outside VOCAB."""
    try:
        return [stoi[ch] for ch in text]
    except KeyError as err:
        raise KeyError(f"character {err.args[0]!r} is not in the vocabulary {VOCAB!r}") from None


def decode(ids) -> str:
    """Text of a sequence of token ids (a list or a 1-D tensor)."""
    return "".join(itos[int(i)] for i in ids)


def _digits(x: torch.Tensor, width: int) -> torch.Tensor:
    """Decimal digits of ``x`` (N,), most significant first, zero-padded to ``width``."""
    powers = 10 ** torch.arange(width - 1, -1, -1, device=x.device)  # (width,)
    return (x.unsqueeze(1) // powers) % 10  # (N, width)


@dataclass(frozen=True)
class Task:
    """An arithmetic task: ``op`` in OPS on ``ndigit``-digit operands."""

    op: str
    ndigit: int
    reverse: bool = True

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"Task op {self.op!r} is unknown; allowed: {sorted(OPS)}")
        if not isinstance(self.ndigit, int) or not 1 <= self.ndigit <= MAX_NDIGIT:
            raise ValueError(f"Task ndigit {self.ndigit!r} must be an integer in 1..{MAX_NDIGIT}")

    @property
    def symbol(self) -> str:
        return OPS[self.op].symbol

    @property
    def prompt_len(self) -> int:
        return 2 * self.ndigit + 2

    @property
    def answer_width(self) -> int:
        """W: the number of answer digits, enough for the largest result."""
        return self.ndigit + 1 if self.op == "add" else 2 * self.ndigit

    @property
    def answer_len(self) -> int:
        return self.answer_width + 1

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.answer_len

    @property
    def max_operand(self) -> int:
        """The largest operand (inclusive): 10**ndigit - 1."""
        return 10**self.ndigit - 1

    def prompt_text(self, a: int, b: int) -> str:
        """Human-readable prompt, e.g. ``007+045=``."""
        n = self.ndigit
        return f"{a:0{n}d}{self.symbol}{b:0{n}d}="

    def answer_text(self, a: int, b: int) -> str:
        """Human-readable answer exactly as the model should write it, e.g. ``2500$``."""
        digits = f"{OPS[self.op].fn(a, b):0{self.answer_width}d}"
        return (digits[::-1] if self.reverse else digits) + "$"

    def _check_operands(self, a: torch.Tensor, b: torch.Tensor) -> None:
        if a.shape != b.shape or a.dim() != 1:
            raise ValueError(
                f"operands must be two 1-D tensors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}"
            )
        ab = torch.stack([a, b])  # (2, N)
        if ab.numel() and (ab.min() < 0 or ab.max() > self.max_operand):
            raise ValueError(f"operands must lie in 0..{self.max_operand} for {self}")

    def encode_prompts(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Prompt tokens (N, prompt_len) for operand tensors ``a``, ``b`` of shape (N,)."""
        self._check_operands(a, b)
        n, N = self.ndigit, a.shape[0]
        sym = torch.full((N, 1), stoi[self.symbol], dtype=torch.long, device=a.device)
        eq = torch.full((N, 1), EQUALS, dtype=torch.long, device=a.device)
        return torch.cat([_digits(a, n), sym, _digits(b, n), eq], dim=1)  # (N, 2n+2)

    def encode_answers(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Answer tokens (N, answer_len): the W result digits in task order, then ``$``."""
        self._check_operands(a, b)
        digits = _digits(OPS[self.op].fn(a, b), self.answer_width)  # (N, W)
        if self.reverse:
            digits = digits.flip(1)
        end = torch.full((a.shape[0], 1), END, dtype=torch.long, device=a.device)
        return torch.cat([digits, end], dim=1)  # (N, W+1)

    def decode_answers(self, tokens: torch.Tensor) -> torch.Tensor:
        """Integer values (N,) of answer rows (N, answer_len); -1 where a row is malformed
        (a non-digit among the first W tokens, or no ``$`` at position W)."""
        W = self.answer_width
        digits = tokens[:, :W]  # (N, W)
        ok = ((digits >= 0) & (digits <= 9)).all(1) & (tokens[:, W] == END)  # (N,)
        powers = 10 ** torch.arange(W, device=tokens.device)  # (W,) least significant first
        if not self.reverse:
            powers = powers.flip(0)
        values = (digits.clamp(0, 9) * powers).sum(1)  # (N,)
        return torch.where(ok, values, torch.full_like(values, -1))

    def sample_operands(self, n: int, generator: torch.Generator, ndigit: int | None = None):
        """``(a, b)``, each (n,), uniform in [0, 10**nd) with nd = ``ndigit`` or the task's
        own; a smaller nd is a curriculum stage that keeps the full token width."""
        nd = self.ndigit if ndigit is None else ndigit
        if not 1 <= nd <= self.ndigit:
            raise ValueError(f"ndigit {nd} must lie in 1..{self.ndigit} for {self}")
        ab = torch.randint(0, 10**nd, (2, n), generator=generator, device=generator.device)  # (2, n)
        return ab[0], ab[1]


def _index_to_pairs(idx: torch.Tensor, ndigit: int) -> torch.Tensor:
    """Pair index i = a * 10**ndigit + b, (N,) -> (a, b) pairs (N, 2)."""
    return torch.stack([idx // 10**ndigit, idx % 10**ndigit], dim=1)


def _distinct_indices(k: int, total: int, generator: torch.Generator) -> torch.Tensor:
    """``k`` distinct random indices in [0, total), in draw order, by rejection (k << total)."""
    drawn = torch.empty(0, dtype=torch.long)
    while True:
        extra = torch.randint(0, total, (k - drawn.numel() + k // 10 + 16,), generator=generator)
        drawn = torch.cat([drawn, extra])
        # keep each value's first occurrence, in draw order, so the result is deterministic
        uniq, inverse = torch.unique(drawn, return_inverse=True)
        positions = torch.arange(drawn.numel())
        first = torch.full_like(uniq, drawn.numel()).scatter_reduce(0, inverse, positions, "amin")
        drawn = drawn[first.sort().values]
        if drawn.numel() >= k:
            return drawn[:k]


def problem_splits(task: Task, n_train: int | None, n_test: int, seed: int, n_val: int = 0) -> dict[str, torch.Tensor]:
    """Disjoint ``train``, ``val`` and ``test`` sets of distinct (a, b) pairs, each (N, 2), fixed by ``seed``.

    The test set is the first ``n_test`` pairs of the seeded order whatever ``n_val`` is, so
    adding a validation split leaves the held-out test set unchanged; validation takes the
    next ``n_val`` pairs and training the rest. ``n_train`` None or 0 means every pair not
    held out (for small spaces)."""
    total = 10 ** (2 * task.ndigit)
    rest = not n_train
    held = n_test + n_val
    if n_test < 0 or n_val < 0 or (n_train or 0) < 0 or held + (n_train or 0) > total:
        raise ValueError(
            f"{task} has {total} distinct problems: cannot draw n_train={n_train} "
            f"plus n_test={n_test} plus n_val={n_val} distinct ones"
        )
    gen = torch.Generator().manual_seed(seed)
    if total <= _RANDPERM_LIMIT:
        idx = torch.randperm(total, generator=gen)
        idx = idx if rest else idx[: held + n_train]
    elif rest:
        raise ValueError(
            f"n_train={n_train!r} (all the rest) would be {total - held} problems for {task}; give n_train explicitly"
        )
    else:
        idx = _distinct_indices(held + n_train, total, gen)
    pairs = _index_to_pairs(idx, task.ndigit)  # (n_test + n_val + n_train, 2)
    return {"train": pairs[held:], "val": pairs[n_test:held], "test": pairs[:n_test]}


def make_problem_sets(task: Task, n_train: int | None, n_test: int, seed: int):
    """Disjoint ``(train, test)`` sets without a validation split (see `problem_splits`)."""
    splits = problem_splits(task, n_train, n_test, seed)
    return splits["train"], splits["test"]


def write_problem_splits(cfg: dict, name: str) -> tuple[Path, dict[str, torch.Tensor]]:
    """Draw task `name`'s splits as configured (`problem_splits`) and write each to its file
    under the results tree, with ``meta.json`` beside them; returns that folder and the splits."""
    from mathrl.pipeline.layout import PROBLEM_SPLITS, problems_file

    t, task = cfg["tasks"][name], task_of(cfg, name)
    splits = problem_splits(task, t["n_train"], t["n_test"], t["seed"], n_val=t["n_val"])
    for split in PROBLEM_SPLITS:
        write_problems(problems_file(cfg, name, split), task, splits[split])
    out = problems_file(cfg, name, "train").parent
    meta = {"task": name, **t, **{f"n_{split}_written": len(splits[split]) for split in PROBLEM_SPLITS}}
    atomic_write(out / "meta.json", json.dumps(meta, indent=2) + "\n")
    return out, splits


def write_problems(path, task: Task, pairs: torch.Tensor) -> None:
    """Write ``pairs`` (N, 2) as lines ``123+456=579`` (zero-padded operands, true result),
    atomically: readers see the old file or the whole new one, never a partial one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    a, b = pairs[:, 0].contiguous(), pairs[:, 1].contiguous()
    task._check_operands(a, b)
    fn = OPS[task.op].fn
    text = "".join(f"{task.prompt_text(x, y)}{fn(x, y)}\n" for x, y in zip(a.tolist(), b.tolist()))
    atomic_write(path, text)


_LINE = re.compile(r"([0-9]+)([+*])([0-9]+)=([0-9]+)")


def read_problems(path, task: Task) -> torch.Tensor:
    """Parse a problem file written by ``write_problems`` into pairs (N, 2), checking every
    line (format, operator, operand widths, result); raises ProblemFileError otherwise."""
    n, sym, fn = task.ndigit, task.symbol, OPS[task.op].fn
    expected = f"'{'9' * n}{sym}{'9' * n}=RESULT' ({n}-digit zero-padded operands, the true result)"
    pairs = []
    if not Path(path).is_file():
        raise ProblemFileError(f"{path} is missing (run `mathrl problems` first)")
    with open(path) as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            m = _LINE.fullmatch(line)
            problem = None
            if m is None:
                problem = f"expected {expected}"
            elif m[2] != sym:
                problem = f"operator {m[2]!r} does not match task {task.op!r}: expected {sym!r}"
            elif len(m[1]) != n or len(m[3]) != n:
                problem = f"expected {n}-digit zero-padded operands"
            elif int(m[4]) != fn(int(m[1]), int(m[3])):
                problem = f"wrong result: expected {fn(int(m[1]), int(m[3]))}"
            if problem:
                raise ProblemFileError(f"{path}, line {lineno}: {line!r}: {problem}")
            pairs.append((int(m[1]), int(m[3])))
    if not pairs:
        raise ProblemFileError(f"{path}: the problem file is empty; expected lines like {expected}")
    return torch.tensor(pairs, dtype=torch.long)


def filter_by_ndigit(pairs: torch.Tensor, nd: int) -> torch.Tensor:
    """The rows of ``pairs`` (N, 2) whose operands both have at most ``nd`` digits."""
    return pairs[(pairs < 10**nd).all(dim=1)]  # (M, 2)


def task_of(cfg: dict, name: str) -> Task:
    """The task `name` of a completed config (its `tasks` block)."""
    t = cfg["tasks"][name]
    return Task(op=t["op"], ndigit=t["ndigit"], reverse=t["reverse"])


def answer_mask(tokens: torch.Tensor) -> torch.Tensor:
    """tokens (B, L) -> (B, L) float: 1.0 on answer tokens up to and including the first end token."""
    is_end = (tokens == END).long()  # (B, L)
    return ((is_end.cumsum(1) - is_end) == 0).float()
