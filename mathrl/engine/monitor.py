"""The stability monitor: watches entropy, KL and reward each step and raises alerts.

The three checks are those of the stability document's debugging recipe: policy entropy
collapsing, KL to the reference exploding, and the reward swinging within a short window.
Alerts are plain dicts ``{"step", "kind", "value", "threshold", "message"}`` that go into
the run's ``summary.json``.

Alerts are edge-triggered: an alert fires on the step its condition becomes true and
then stays quiet while the condition persists; once the condition has cleared it may fire
again. A level-triggered monitor would repeat the same alert on every step of a collapse
and bury the moment it started, which is what one reads the log for.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

ALERT_KINDS = ("low_entropy", "high_kl", "reward_swing", "nonfinite", "grad_norm_spike", "entropy_rise")
_CHECKED = ("low_entropy", "high_kl", "reward_swing", "grad_norm_spike", "entropy_rise")


class StabilityMonitor:
    """Edge-triggered alerts on low entropy, high KL and reward swings.

    - ``low_entropy``: ``entropy < entropy_min``;
    - ``high_kl``: ``kl > kl_max``;
    - ``reward_swing``: ``max - min`` of the last ``window`` reward means ``> reward_swing``,
      checked only once ``window`` values have been seen. With ``swing_sigmas`` and
      ``batch_size`` the threshold is instead that many sampling standard errors of a batch
      mean at the window's mean reward (``noise_threshold``): a swing a batch of that size
      produces by chance does not fire.

    A threshold of None switches its check off. A NaN measurement (e.g. the KL of an
    algorithm without a reference) neither raises nor clears an alert and a NaN reward is
    not added to the window: a missing value says nothing about the condition.
    """

    def __init__(
        self,
        entropy_min: float | None = 0.5,
        kl_max: float | None = 0.5,
        reward_swing: float | None = 0.3,
        window: int = 10,
        swing_sigmas: float | None = None,
        batch_size: int | None = None,
    ):
        if window < 2:
            raise ValueError(f"reward-swing window must be >= 2, got {window}")
        self.entropy_min = entropy_min
        self.kl_max = kl_max
        self.reward_swing = reward_swing
        self.window = int(window)
        self.swing_sigmas, self.batch_size = swing_sigmas, batch_size
        self._rewards: deque[float] = deque(maxlen=self.window)
        self._active = {kind: False for kind in _CHECKED}
        self._alerts: list[dict] = []

    @property
    def alerts(self) -> list[dict]:
        """Every alert raised or recorded so far, in order (a copy)."""
        return list(self._alerts)

    def record(self, step: int, kind: str, value: float, message: str) -> dict:
        """Append an alert detected elsewhere (e.g. kind "nonfinite" from the trainer's
        guard against a NaN/inf loss) and return it. Not edge-filtered."""
        alert = {
            "step": int(step),
            "kind": str(kind),
            "value": float(value),
            "threshold": None,
            "message": str(message),
        }
        self._alerts.append(alert)
        return alert

    def _edge(
        self,
        step: int,
        kind: str,
        condition: bool | None,
        value: float,
        threshold: float,
        message: str,
    ) -> dict | None:
        """Fire when ``condition`` turns true; None means "unknown", state unchanged."""
        if condition is None:
            return None
        fire = condition and not self._active[kind]
        self._active[kind] = condition
        if not fire:
            return None
        alert = {
            "step": int(step),
            "kind": kind,
            "value": float(value),
            "threshold": float(threshold),
            "message": message,
        }
        self._alerts.append(alert)
        return alert

    def check(self, step: int, entropy: float, kl: float, reward_mean: float) -> list[dict]:
        """Run the three checks on this step's metrics; return the alerts raised now."""
        entropy, kl, reward_mean = float(entropy), float(kl), float(reward_mean)
        raised = []

        if self.entropy_min is not None:
            cond = None if math.isnan(entropy) else entropy < self.entropy_min
            raised.append(
                self._edge(
                    step,
                    "low_entropy",
                    cond,
                    entropy,
                    self.entropy_min,
                    f"policy entropy {entropy:.4g} below {self.entropy_min:g}",
                )
            )

        if self.kl_max is not None:
            cond = None if math.isnan(kl) else kl > self.kl_max
            raised.append(
                self._edge(
                    step,
                    "high_kl",
                    cond,
                    kl,
                    self.kl_max,
                    f"KL to reference {kl:.4g} above {self.kl_max:g}",
                )
            )

        if not math.isnan(reward_mean):
            self._rewards.append(reward_mean)
        scaled = self.swing_sigmas is not None and bool(self.batch_size)
        if (self.reward_swing is not None or scaled) and len(self._rewards) == self.window:
            lo, hi = min(self._rewards), max(self._rewards)
            mean = sum(self._rewards) / len(self._rewards)
            threshold = noise_threshold(mean, self.batch_size, self.swing_sigmas) if scaled else self.reward_swing
            raised.append(
                self._edge(
                    step,
                    "reward_swing",
                    hi - lo > threshold,
                    hi - lo,
                    threshold,
                    f"reward mean swung {hi - lo:.4g} ({lo:.4g} to {hi:.4g}) within the last "
                    f"{self.window} steps, above {threshold:.4g}",
                )
            )

        return [a for a in raised if a is not None]

    def check_trends(
        self,
        step: int,
        grad_norm: float,
        entropy: float,
        grad_spike: float | None = 5.0,
        entropy_rise: float | None = 0.5,
    ) -> list[dict]:
        """Two alerts against the run's own recent history (the previous ``window`` steps, this
        one excluded), checked once ``window`` values have been seen:

        - ``grad_norm_spike``: ``grad_norm > grad_spike * median(previous grad norms)``;
        - ``entropy_rise``: ``entropy > (1 + entropy_rise) * min(previous entropies)``.

        A threshold of None switches its check off; NaN (and a non-finite gradient norm, which
        the trainer reports as "nonfinite") is not kept and decides nothing."""
        grad_norm, entropy, window = float(grad_norm), float(entropy), self.window
        if not hasattr(self, "_norms"):  # the trend histories (kept apart from the three checks' state)
            self._norms, self._entropies = deque(maxlen=window), deque(maxlen=window)
        raised = []
        if grad_spike is not None and len(self._norms) == window and math.isfinite(grad_norm):
            ref = statistics.median(self._norms)
            raised.append(
                self._edge(
                    step,
                    "grad_norm_spike",
                    grad_norm > grad_spike * ref,
                    grad_norm,
                    grad_spike * ref,
                    f"gradient norm {grad_norm:.4g} above {grad_spike:g} x the median {ref:.4g} of the last {window}"
                    " steps",
                )
            )
        if entropy_rise is not None and len(self._entropies) == window and not math.isnan(entropy):
            low = min(self._entropies)
            raised.append(
                self._edge(
                    step,
                    "entropy_rise",
                    entropy > (1 + entropy_rise) * low,
                    entropy,
                    (1 + entropy_rise) * low,
                    f"entropy {entropy:.4g} rose above {1 + entropy_rise:g} x its minimum {low:.4g} of the last"
                    f" {window} steps",
                )
            )
        if math.isfinite(grad_norm):  # a non-finite norm is the "nonfinite" alert's, not a spike
            self._norms.append(grad_norm)
        if not math.isnan(entropy):
            self._entropies.append(entropy)
        return [a for a in raised if a is not None]

    def state_dict(self) -> dict:
        """History and edge states as plain Python types (loads with weights_only=True)."""
        return {
            "norms": list(getattr(self, "_norms", [])),
            "entropies": list(getattr(self, "_entropies", [])),
            "rewards": list(self._rewards),
            "active": dict(self._active),
            "alerts": [dict(a) for a in self._alerts],
        }

    def load_state_dict(self, state: dict) -> None:
        self._rewards = deque((float(r) for r in state["rewards"]), maxlen=self.window)
        self._active = {kind: bool(state["active"].get(kind, False)) for kind in _CHECKED}
        self._alerts = [dict(a) for a in state["alerts"]]
        self._norms = deque((float(v) for v in state.get("norms", [])), maxlen=self.window)
        self._entropies = deque((float(v) for v in state.get("entropies", [])), maxlen=self.window)


# ----------------------------------------------------------------------------- noise and scoring (pure)
def noise_threshold(mean_reward: float, batch_size: int, sigmas: float) -> float:
    """`sigmas` standard errors of a batch-mean reward: sqrt(p (1 - p) / batch_size) at the
    mean reward p (clamped to [0, 1]; a 0/1 reward's binomial error), floored at one
    rollout's share 1 / batch_size so a reward at 0 or 1 does not make every wobble an alert."""
    p = min(max(float(mean_reward), 0.0), 1.0)
    return float(sigmas) * max(math.sqrt(p * (1 - p) / batch_size), 1.0 / batch_size)


def sustained_drops(steps, accuracy, drop: float = 0.05, sustain: int = 2) -> list:
    """Steps where held-out accuracy starts a sustained drop: at least `drop` below its running
    best for `sustain` evaluations in a row (the step of the first of them). One drop is
    counted once; a new one may start after accuracy has come back within `drop` of the best."""
    out, best, run, start = [], -math.inf, 0, None
    for step, acc in zip(steps, accuracy):
        if acc != acc:  # NaN: no evaluation
            continue
        if acc <= best - drop:
            run, start = run + 1, start if run else step
            if run == sustain:
                out.append(start)
        else:
            run, start = 0, None
        best = max(best, acc)
    return out


def precision_recall(alert_steps, drop_steps, horizon: int) -> tuple[int, int, int, int]:
    """(alerts followed by a drop onset within `horizon` steps, alerts, drops preceded by an alert
    within `horizon` steps, drops): the counts behind an alert's precision and recall."""
    alerts, drops = sorted(alert_steps), sorted(drop_steps)
    hit = sum(any(a < d <= a + horizon for d in drops) for a in alerts)
    caught = sum(any(d - horizon <= a < d for a in alerts) for d in drops)
    return hit, len(alerts), caught, len(drops)
