"""Schedules and controllers that steer training from step to step.

Pure schedules (``lr_factor``, ``entropy_coef_at``) map a step to a number. Stateful
controllers (the moving-average baseline, the KL controllers) keep their state in plain
Python floats and expose ``state_dict()`` / ``load_state_dict()`` with nothing but floats,
ints and None, so a snapshot holding them loads with ``torch.load(weights_only=True)`` and
a resumed run continues exactly where it stopped.
"""

from __future__ import annotations

import math

LR_SCHEDULES = ("constant", "step", "cosine")
ENTROPY_SCHEDULES = ("constant", "linear", "cosine")
KL_CONTROLLERS = ("fixed", "adaptive", "threshold")


def _allowed(what: str, value: object, allowed: tuple[str, ...]) -> ValueError:
    return ValueError(f"unknown {what}={value!r}; allowed: {', '.join(allowed)}")


# --------------------------------------------------------------------------- schedules


def lr_factor(
    schedule: str,
    step: int,
    total_steps: int,
    decay_rate: float = 0.9,
    decay_every: int = 500,
    min_factor: float = 0.0,
    warmup_steps: int = 0,
) -> float:
    """Multiplier of the base learning rate at ``step`` (0-based); lr = lr0 * factor.

    - ``"constant"``: 1.
    - ``"step"``: ``decay_rate ** (s // decay_every)``; with the defaults this is the
      documents' ``lr = lr0 * 0.9 ** (step // 500)``.
    - ``"cosine"``: ``min_factor + (1 - min_factor) * (1 + cos(pi * s / S)) / 2``, from 1 at
      s = 0 down to ``min_factor`` at s = S, constant after.

    With ``warmup_steps = W > 0`` the factor first rises linearly as ``(step + 1) / W``
    (the first step already moves; ``step / W`` would waste it at lr 0), and the schedule
    then runs on ``s = step - W`` over ``S = total_steps - W``. Without warm-up s = step.
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    s = step - max(warmup_steps, 0)
    if schedule == "constant":
        return 1.0
    if schedule == "step":
        if decay_every <= 0:
            raise ValueError(f"decay_every must be > 0, got {decay_every}")
        return decay_rate ** (s // decay_every)
    if schedule == "cosine":
        span = total_steps - max(warmup_steps, 0)
        if span <= 0:
            raise ValueError(f"cosine schedule needs total_steps > warmup_steps, got {total_steps} and {warmup_steps}")
        progress = min(max(s / span, 0.0), 1.0)
        return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise _allowed("lr schedule", schedule, LR_SCHEDULES)


def entropy_coef_at(schedule: str, step: int, total_steps: int, start: float, end: float) -> float:
    """Entropy-bonus coefficient at ``step``, decayed from ``start`` to ``end``.

    With progress ``f = clamp(step / total_steps, 0, 1)``:
    ``"constant"``: start; ``"linear"``: ``start + (end - start) * f``;
    ``"cosine"``: ``end + (start - end) * (1 + cos(pi * f)) / 2``. A large bonus early
    keeps the policy exploring; decaying it lets the policy sharpen once it has learnt
    (the collapse analysis's remedy for entropy collapse).
    """
    if schedule == "constant":
        return float(start)
    if schedule not in ENTROPY_SCHEDULES:
        raise _allowed("entropy schedule", schedule, ENTROPY_SCHEDULES)
    if total_steps <= 0:
        raise ValueError(f"entropy schedule {schedule!r} needs total_steps > 0, got {total_steps}")
    f = min(max(step / total_steps, 0.0), 1.0)
    if schedule == "linear":
        return start + (end - start) * f
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * f))


# --------------------------------------------------------------------------- baseline


class MovingAverageBaseline:
    """Exponential moving average of the batch mean reward, the REINFORCE baseline.

    ``update(mean_reward)`` returns the baseline for THIS batch and then folds the batch in:
    ``b <- decay * b + (1 - decay) * mean_reward`` (the documents' 0.9 / 0.1 rule).

    The returned value is the one from BEFORE this batch. A baseline that includes the
    current rewards is correlated with them, which biases the policy gradient; the
    documents' snippet (update, then subtract) has that flaw.

    Uninitialised (``init=None``), the first batch uses its own mean as the baseline and
    the average starts there. That one step is slightly biased (a batch-mean baseline
    shrinks the expected gradient by a factor 1 - 1/B, it does not turn it), whereas a
    baseline of 0 would give every rollout of the first batch an advantage of the same
    sign, the noisiest possible first update.
    """

    def __init__(self, decay: float = 0.9, init: float | None = None):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"baseline decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
        self._value = None if init is None else float(init)

    @property
    def value(self) -> float | None:
        """The current average (None before the first batch when started without init)."""
        return self._value

    def update(self, mean_reward: float) -> float:
        """Return the baseline for the batch whose mean reward is given, then update."""
        mean_reward = float(mean_reward)
        if self._value is None:
            self._value = mean_reward
            return mean_reward
        baseline = self._value
        self._value = self.decay * self._value + (1.0 - self.decay) * mean_reward
        return baseline

    def state_dict(self) -> dict:
        return {"decay": self.decay, "value": self._value}

    def load_state_dict(self, state: dict) -> None:
        self.decay = float(state["decay"])
        self._value = None if state["value"] is None else float(state["value"])


# --------------------------------------------------------------------------- KL controllers


class KLController:
    """Common state of the KL-penalty controllers: one coefficient, a plain float."""

    def __init__(self, coef: float):
        self.coef = float(coef)

    @property
    def value(self) -> float:
        """The coefficient to use now."""
        return self.coef

    def update(self, kl: float, n_steps: int = 1) -> float:
        """Take the KL measured at this step; return the coefficient for the next step."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"coef": self.coef}

    def load_state_dict(self, state: dict) -> None:
        self.coef = float(state["coef"])


class FixedKL(KLController):
    """A constant coefficient: ``update`` ignores the KL."""

    def update(self, kl: float, n_steps: int = 1) -> float:
        return self.coef


class AdaptiveKL(KLController):
    """Proportional controller of Ziegler et al. (2019), steering KL towards ``target``.

    ``e = clip(kl / target - 1, -0.2, 0.2)``, ``coef <- coef * (1 + e * n_steps / horizon)``.
    The clip bounds the change per update, so one noisy KL estimate cannot swing the
    coefficient. A non-finite KL leaves the coefficient unchanged.
    """

    def __init__(self, init_coef: float, target: float, horizon: float):
        super().__init__(init_coef)
        if target <= 0 or horizon <= 0:
            raise ValueError(f"adaptive KL needs target > 0 and horizon > 0, got {target} and {horizon}")
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, kl: float, n_steps: int = 1) -> float:
        kl = float(kl)
        if math.isfinite(kl):
            error = min(max(kl / self.target - 1.0, -0.2), 0.2)
            self.coef *= 1.0 + error * n_steps / self.horizon
        return self.coef


class ThresholdKL(KLController):
    """The stability document's bang-bang controller with a dead band.

    ``kl > 2 * target``: ``coef <- min(coef * up, max_coef)``;
    ``kl < 0.5 * target``: ``coef <- max(coef * down, min_coef)``; otherwise unchanged.
    One adjustment per call whatever ``n_steps``; a non-finite KL changes nothing.
    """

    def __init__(
        self,
        init_coef: float,
        target: float,
        up: float = 1.5,
        down: float = 0.8,
        max_coef: float = 1.0,
        min_coef: float = 0.01,
    ):
        super().__init__(init_coef)
        if target <= 0:
            raise ValueError(f"threshold KL needs target > 0, got {target}")
        if min_coef > max_coef:
            raise ValueError(f"threshold KL needs min_coef <= max_coef, got {min_coef} > {max_coef}")
        self.target = float(target)
        self.up, self.down = float(up), float(down)
        self.max_coef, self.min_coef = float(max_coef), float(min_coef)

    def update(self, kl: float, n_steps: int = 1) -> float:
        kl = float(kl)
        if kl > 2.0 * self.target:
            self.coef = min(self.coef * self.up, self.max_coef)
        elif kl < 0.5 * self.target:
            self.coef = max(self.coef * self.down, self.min_coef)
        return self.coef


def make_kl_controller(
    kind: str,
    coef: float,
    target: float | None = None,
    horizon: float = 10000,
    *,
    up: float = 1.5,
    down: float = 0.8,
    max_coef: float = 1.0,
    min_coef: float = 0.01,
) -> KLController:
    """Build the KL controller named ``kind`` (one of ``KL_CONTROLLERS``) starting at ``coef``.

    ``target`` is required by "adaptive" and "threshold"; ``horizon`` is used by "adaptive",
    ``up/down/max_coef/min_coef`` by "threshold".
    """
    if kind == "fixed":
        return FixedKL(coef)
    if kind not in KL_CONTROLLERS:
        raise _allowed("KL controller", kind, KL_CONTROLLERS)
    if target is None:
        raise ValueError(f"KL controller {kind!r} needs a target KL")
    if kind == "adaptive":
        return AdaptiveKL(coef, target, horizon)
    return ThresholdKL(coef, target, up=up, down=down, max_coef=max_coef, min_coef=min_coef)
