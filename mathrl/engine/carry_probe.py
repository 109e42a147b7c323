"""The carry probe: how uncertain a policy is at each answer token of addition, by whether a carry enters the digit.

arXiv 2506.01939 finds that a minority of high-entropy "forking" tokens carry reinforcement learning; on reversed
addition the natural candidates are the digits a carry enters. A run with `carry_probe: true` writes
`carry_probe.csv` when it completes: teacher-forced on the correct answers of the first `PROBE_PROBLEMS` problems of
its task's test set, the entropy of the policy's distribution at each answer token (temperature 1, in float64, so that
no number depends on how many threads summed a matrix product) for the policy the run started from and for its final
policy, averaged per answer position and carry flag (`carry_entropy`). The analysis reads the file (and this
module's constants: it imports torch only inside the functions that run a model); it never runs a model.
"""

from __future__ import annotations

import copy

PROBE_PROBLEMS = 1000
COLUMNS = ["checkpoint", "position", "carry", "entropy", "tokens"]  # checkpoint: start or final


def answer_entropy(model, task, pairs):
    """(N, L) entropy of `model`'s distribution at each answer token of `pairs`, teacher-forced on the right answers;
    computed on a float64 copy on the CPU (the model itself is left as it is)."""
    import torch

    from mathrl.engine.losses import token_entropy
    from mathrl.engine.sft import sft_batch

    x, _ = sft_batch(task, pairs)
    probe = copy.deepcopy(model).cpu().double().eval()
    with torch.no_grad():
        logits = probe(x)[:, task.prompt_len - 1 :]  # the logits that predict each answer token
    return token_entropy(logits)


def carry_entropy(entropy, carry) -> list[dict]:
    """Mean entropy per answer position and carry, from (N, L) entropies and carry flags: rows of position, carry
    (bool), entropy, tokens (each kind at each position where it occurs)."""
    rows = []
    for pos in range(entropy.shape[1]):
        for flag in (False, True):
            sel = carry[:, pos] == flag
            if int(sel.sum()):
                mean = float(entropy[sel, pos].mean())
                rows.append({"position": pos, "carry": flag, "entropy": mean, "tokens": int(sel.sum())})
    return rows


def probe_csv(policies: dict, task, pairs) -> bytes:
    """carry_probe.csv of the policies by checkpoint name (start, final) on `pairs` (floats as Python writes them:
    they read back bit for bit)."""
    from mathrl.engine.token_selection import carry_in

    pairs = pairs[:PROBE_PROBLEMS]
    carry = carry_in(pairs[:, 0], pairs[:, 1], task.answer_width).numpy()
    lines = [",".join(COLUMNS)]
    for name, model in policies.items():
        entropy = answer_entropy(model, task, pairs).numpy()
        for row in carry_entropy(entropy, carry):
            lines.append(f"{name},{row['position']},{row['carry']},{row['entropy']!r},{row['tokens']}")
    return ("\n".join(lines) + "\n").encode()
