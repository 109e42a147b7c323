"""The metrics of an RL step: metrics.csv's columns, and the accumulator that records each where it is computed.

`COLUMNS` is the file's layout: DESIGN.md's columns in their order, then ours. The trainer
makes one `StepMetrics` per step, and the line that computes a metric records it under its
column's name (a name that is no column is refused, so a typo cannot become a silent NaN
column); `reduce` then adds every rank's sums in one collective and returns the row, NaN
where nothing was recorded (a metric that does not apply to the run).

`GradNoiseProbe` measures the gradient noise scale tr(Σ)/|G|² from the gradients that the
micro-batches of one step accumulate.
"""

from __future__ import annotations

import math

import torch

from mathrl.analysis.estimators import noise_scale
from mathrl.engine.distributed import Dist, all_max, all_sum
from mathrl.engine.losses import moments
from mathrl.engine.mismatch import METRICS as MISMATCH
from mathrl.pipeline.layout import METRIC_COLUMNS

# metrics.csv columns fixed by DESIGN.md (layout: `mathrl import` writes them too), then our extras
# (docs/guide/outputs.md says what each means).
METRICS = METRIC_COLUMNS
EXTRAS = [
    "eval_sampled_accuracy",
    "ndigit",
    "format_rate",
    "baseline",
    "entropy_coef",
    "value_rmse",
    "explained_variance",
    # how far the second and later PPO epochs moved the critic's values (mean |v - v_old|), and the share it clipped
    "value_delta",
    "value_clip_frac",
    "skipped",
    "sample_seconds",
    "update_seconds",
    "eval_seconds",
    # update diagnostics: clip_frac = clip_frac_low + clip_frac_high; ppo_kl as verl's actor/ppo_kl;
    # token-level advantage statistics; the log-prob/advantage covariance (arXiv 2505.22617);
    # cov_frac: share of tokens Clip-Cov or KL-Cov acted on
    # clip_higher_freed: positive-advantage tokens whose ratio lies between 1 + clip_eps and 1 + clip_eps_high;
    # clip_tighter_cut: tokens the clip cut whose ratio lies within PPO's standard [0.8, 1.2]
    "clip_frac_low",
    "clip_frac_high",
    "clip_higher_freed",
    "clip_tighter_cut",
    "ppo_kl",
    "adv_mean",
    "adv_std",
    "adv_abs_max",
    "logp_adv_cov",
    "cov_frac",
    # the gradient noise scale tr(Σ)/|G|² from micro-batch gradients (train.grad_noise_scale):
    # mean squared norm of a micro-batch's own gradient, of the batch's, and the ratio of the estimates
    "grad_sq_micro",
    "grad_sq_batch",
    "grad_noise_scale",
    # the policy losses' own clips (mathrl.engine.policy_losses): sequences GSPO's clip cut, tokens whose
    # importance weight CISPO's bound cut, tokens dual-clip's lower bound hit
    "seq_clip_frac",
    "is_clip_frac",
    "dual_clip_frac",
    # the token selection (mathrl.engine.token_selection): the share of answer tokens the policy gradient trained on,
    # and the
    # mean entropy (sampling policy, at the rollout) of the selected and of the other answer tokens
    "token_selected_frac",
    "entropy_selected",
    "entropy_unselected",
    # the rollout/trainer mismatch (mathrl.engine.mismatch): sampler against trainer log-probs of the sampled tokens
    *MISMATCH,
]
COLUMNS = METRICS + EXTRAS


class StepMetrics:
    """One step's metrics, each recorded once where it is computed.

    - `value`: a value of the whole step as it stands (the step, the learning rate, a mean
      already taken over every rank);
    - `ratio`: a sum and its count, each added up over micro-batches, PPO epochs and ranks;
      the metric is their quotient (NaN over a count of 0);
    - `masked_mean`: the same for a tensor over the answer tokens of a mask, (B, T), or over
      the sequences, (B,);
    - `divided`: a sum over micro-batches and ranks divided by a count already global (the
      loss's divisor);
    - `maximum`: the largest value over micro-batches and ranks;
    - `moments`: means, stds and covariance of two tensors over a mask (`losses.moment_sums`);
    - `summed`: any sums, added up likewise, from which a function computes columns (statistics
      that are no single quotient, such as an effective sample size).
    """

    def __init__(self):
        self._values: dict[str, float] = {}
        self._ratios: dict[str, list[float]] = {}  # name -> [sum, count]
        self._divided: dict[str, list[float]] = {}  # name -> [sum, global divisor]
        self._maxima: dict[str, float] = {}
        self._moments: dict[tuple[tuple[str, str], ...], torch.Tensor] = {}  # (moment, column) pairs -> sums
        self._summed: dict[object, list] = {}  # finish -> [sums, finish]

    @staticmethod
    def _known(name: str) -> str:
        if name not in COLUMNS:
            raise KeyError(f"metric {name!r} is not a column of metrics.csv (mathrl.engine.metrics.COLUMNS)")
        return name

    def value(self, name: str, x) -> None:
        self._values[self._known(name)] = x

    def ratio(self, name: str, total: float, count: float) -> None:
        sums = self._ratios.setdefault(self._known(name), [0.0, 0.0])
        sums[0] += total
        sums[1] += count

    def masked_mean(self, name: str, x: torch.Tensor, mask: torch.Tensor) -> None:
        """x (B, T) over the answer tokens of mask (B, T), or x (B,) over the sequences."""
        if x.dim() == 1:
            self.ratio(name, float(x.float().sum()), float(x.numel()))
        else:
            self.ratio(name, float((x.float() * mask).sum()), float(mask.sum()))

    def divided(self, name: str, total: float, divisor: float) -> None:
        sums = self._divided.setdefault(self._known(name), [0.0, divisor])
        sums[0] += total

    def maximum(self, name: str, x: float) -> None:
        self._maxima[self._known(name)] = max(self._maxima.get(name, x), x)

    def moments(self, sums: torch.Tensor, **columns: str) -> None:
        """Add `losses.moment_sums` (float64, 6); `columns` maps a key of `losses.moments`
        (mean_x, mean_y, std_x, std_y, cov) to the column it fills."""
        key = tuple((moment, self._known(name)) for moment, name in columns.items())
        self._moments[key] = self._moments.get(key, torch.zeros(6, dtype=torch.float64)) + sums.cpu()

    def summed(self, sums: torch.Tensor, finish) -> None:
        """Add `sums` (a float64 vector); at `reduce`, `finish(total)` returns {column: value}."""
        entry = self._summed.setdefault(finish, [torch.zeros(len(sums), dtype=torch.float64), finish])
        entry[0] = entry[0] + sums.detach().double().cpu()

    def reduce(self, d: Dist) -> dict:
        """The row: every column, in COLUMNS' order; sums added over ranks in one collective
        (and the maxima in one more). Every rank records the same names."""
        ratios, divided, blocks = sorted(self._ratios), sorted(self._divided), sorted(self._moments)
        local = [v for n in ratios for v in self._ratios[n]] + [self._divided[n][0] for n in divided]
        local += [v for key in blocks for v in self._moments[key].tolist()]
        summed = list(self._summed.values())
        local += [v for sums, _ in summed for v in sums.tolist()]
        tot = all_sum(d, torch.tensor(local, dtype=torch.float64)).tolist() if local else []
        row = dict.fromkeys(COLUMNS, math.nan)
        for i, name in enumerate(ratios):
            total, count = tot[2 * i], tot[2 * i + 1]
            row[name] = total / count if count else math.nan
        at = 2 * len(ratios)
        for i, name in enumerate(divided):
            row[name] = tot[at + i] / self._divided[name][1]
        at += len(divided)
        for i, key in enumerate(blocks):
            found = moments(tot[at + 6 * i : at + 6 * i + 6])
            row.update({name: found[moment] for moment, name in key})
        at += 6 * len(blocks)
        for sums, finish in summed:
            n = len(sums)
            row.update({self._known(k): v for k, v in finish(tot[at : at + n]).items()})
            at += n
        if self._maxima:
            names = sorted(self._maxima)
            top = all_max(d, torch.tensor([self._maxima[n] for n in names], dtype=torch.float64)).tolist()
            row.update(zip(names, top))
        row.update(self._values)
        return row


class GradNoiseProbe:
    """The gradient noise scale of one step from its micro-batch gradients (McCandlish et al. 2018).

    After each micro-batch's backward, `observe` takes that micro-batch's own gradient (the
    accumulated gradient minus the one before), rescaled to a mean over its own `count`
    (tokens or sequences) instead of the batch's `divisor`. `record` then logs the mean
    squared norm of those gradients (`grad_sq_micro`), of the batch's (`grad_sq_batch`) and
    the noise scale from the two batch sizes. One process only: a rank's gradient before the
    all-reduce is not the batch's."""

    def __init__(self, parameters, micro_size: int, batch_size: int, divisor: float):
        self.parameters, self.divisor = list(parameters), divisor
        self.micro_size, self.batch_size = micro_size, batch_size
        self.previous: torch.Tensor | None = None
        self.micro_sq: list[float] = []

    def observe(self, count: float) -> None:
        grads = [p.grad.detach().flatten().double() for p in self.parameters if p.grad is not None]
        flat = torch.cat(grads)
        own = flat if self.previous is None else flat - self.previous
        self.previous = flat
        self.micro_sq.append(float((own * (self.divisor / count)).square().sum()))

    def record(self, metrics: StepMetrics) -> None:
        if self.previous is None:
            return
        sq_micro, sq_batch = sum(self.micro_sq) / len(self.micro_sq), float(self.previous.square().sum())
        metrics.value("grad_sq_micro", sq_micro)
        metrics.value("grad_sq_batch", sq_batch)
        scale = noise_scale(self.micro_size, self.batch_size, sq_micro, sq_batch)["noise_scale"]
        metrics.value("grad_noise_scale", scale)
