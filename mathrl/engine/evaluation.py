"""Evaluation on held-out problems, shared by the warm-up and the RL trainer: greedy
answers (the score every study reads) and answers sampled at the policy's temperature
(what RL itself sees; the gap between the two is how much RL has sharpened the policy)."""

from __future__ import annotations

import torch

from mathrl.engine.tasks import Task


@torch.no_grad()
def greedy_correct(model, task: Task, pairs: torch.Tensor, device, batch_size: int = 1024) -> torch.Tensor:
    """A bool per problem: did the greedy answer match exactly? `pairs` is (N, 2) of (a, b). A problem stops
    being decoded at its first wrong token (`GPT.matches`)."""
    model_was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        prompts = task.encode_prompts(chunk[:, 0], chunk[:, 1]).to(device)  # (N, P)
        target = task.encode_answers(chunk[:, 0], chunk[:, 1]).to(device)  # (N, W+1)
        out.append(model.matches(prompts, target, greedy=True).cpu())  # generate's answer == target
    model.train(model_was_training)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.bool)


@torch.no_grad()
def sampled_correct(
    model,
    task: Task,
    pairs: torch.Tensor,
    device,
    noise: torch.Tensor,
    temperature: float = 1.0,
    batch_size: int = 1024,
) -> torch.Tensor:
    """A bool per problem: did one answer sampled at `temperature` match exactly? `noise` is
    the uniform noise of `GPT.generate`, (N, answer_len, V), so the draw is reproducible."""
    model_was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        prompts = task.encode_prompts(chunk[:, 0], chunk[:, 1]).to(device)
        target = task.encode_answers(chunk[:, 0], chunk[:, 1]).to(device)
        u = noise[start : start + batch_size].to(device)
        out.append(model.matches(prompts, target, temperature=temperature, noise=u).cpu())
    model.train(model_was_training)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.bool)


@torch.no_grad()
def first_mistakes(model, task: Task, pairs: torch.Tensor, device, limit: int = 3) -> list[str]:
    """The first few wrong greedy answers, as `prompt -> got (want)` lines."""
    correct = greedy_correct(model, task, pairs, device)
    wrong = pairs[~correct][:limit]
    if len(wrong) == 0:
        return []
    prompts = task.encode_prompts(wrong[:, 0], wrong[:, 1]).to(device)
    generated = model.generate(prompts, task.answer_len, greedy=True).cpu()
    from mathrl.engine.tasks import decode

    return [
        f"{task.prompt_text(int(a), int(b))} -> {decode(g.tolist())} (want {task.answer_text(int(a), int(b))})"
        for (a, b), g in zip(wrong.tolist(), generated)
    ]


@torch.no_grad()
def sampled_correct_counts(
    model,
    task: Task,
    pairs: torch.Tensor,
    samples: int,
    temperature: float,
    device,
    generator: torch.Generator,
    rows_per_batch: int = 4096,
) -> torch.Tensor:
    """Correct answers out of `samples` sampled at `temperature` per problem (pass@k's c):
    (N,) int for `pairs` (N, 2). The noise comes from `generator`, so the same generator state
    draws the same samples for the same model (before and after RL: common random numbers)."""
    model_was_training = model.training
    model.eval()
    per = max(1, rows_per_batch // samples)
    out = []
    for start in range(0, len(pairs), per):
        chunk = pairs[start : start + per]
        prompts = task.encode_prompts(chunk[:, 0], chunk[:, 1]).to(device)  # (n, P)
        target = (
            task.encode_answers(chunk[:, 0], chunk[:, 1]).repeat_interleave(samples, dim=0).to(device)
        )  # (n S, W+1)
        noise = torch.rand(len(chunk) * samples, task.answer_len, model.config.vocab_size, generator=generator).to(
            device
        )
        tokens = model.generate(prompts, task.answer_len, temperature=temperature, noise=noise, group_size=samples)
        out.append((tokens == target).all(dim=1).view(len(chunk), samples).sum(dim=1).cpu())
    model.train(model_was_training)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long)
