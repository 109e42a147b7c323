"""May a run resume from its snapshot under the settings it has now?

The promise: a resumed run's metrics equal an uninterrupted run's. So a run may resume only
if no step it has already computed would have been computed differently under the new
settings. That is decided here, not listed by hand: a step's plan is what it reads from the
settings (`Schedule.plan`, mathrl.engine.schedules, the object the trainer reads its schedules from: the learning
rate, the entropy coefficient and the digit count its schedules give it, whether it is evaluated, whether the test
fault fires; `unscheduled`: every
other setting as it is), and a changed setting is a conflict exactly when the plan of some step
up to the snapshot's differs. So `steps=20` after `steps=10` resumes under a constant or step-decayed
learning rate and is refused under a cosine one (whose every step reads `steps`).

Two facts do not come from the plan: a snapshot past the new last step cannot be undone,
and the settings in `OUTSIDE_THE_STEP` only say when to print, snapshot or log elsewhere
(a test checks that changing them leaves the metrics alone).

One difference is repairable rather than a conflict: a run always evaluates its last step,
so after `steps=10` then `steps=20`, step 10 holds an evaluation an uninterrupted run would
not have made (unless 10 is a multiple of `eval_every`). Evaluation changes no state (greedy
decoding, no randomness), so the resumed run forgets that value (`evaluations_to_forget`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mathrl.engine.schedules import OUTSIDE_THE_STEP, Schedule, settings_dict, unscheduled
from mathrl.pipeline.settings import RunSettings


@dataclass(frozen=True)
class Conflict:
    """A changed setting under which a step already computed would have gone differently."""

    key: str
    old: object
    new: object
    step: int  # the first such step
    what: str  # what that step would have computed differently

    def __str__(self) -> str:
        return f"{self.key}: snapshot {self.old!r} vs now {self.new!r} ({self.what} at step {self.step})"


def _first_difference(
    old: Mapping, new: Mapping, done: int, task_ndigit: int, nonfinite: frozenset
) -> tuple[int, str] | None:
    if done >= 1 and unscheduled(old) != unscheduled(new):
        return 1, "every step reads it"  # the same for every step: compared once
    for step in range(1, done + 1):
        try:
            a, b = (Schedule(s, task_ndigit).plan(step, nonfinite) for s in (old, new))
        except (KeyError, TypeError, ValueError) as exc:  # a setting the snapshot's mathrl did not have
            return step, f"cannot be compared ({exc})"
        for item in a:
            if item == "evaluated" and a[item] and not b[item]:
                continue  # an evaluation the new plan does not make: forgotten, not a conflict
            if a[item] != b[item]:
                return step, f"{item} {a[item]!r} would be {b[item]!r}"
    return None


def conflicts(
    old: Mapping, new: RunSettings, done: int, task_ndigit: int, nonfinite_steps: Iterable[int] = ()
) -> list[Conflict]:
    """Each setting of `new` (the run's RunSettings) changed from `old` (the snapshot's recorded dict) that alters a
    step up to `done` (the snapshot's step), with the first step it alters; empty when the run may resume. Each
    changed setting is tried alone on top of the old settings, so the message names the culprits; settings that only
    conflict together are named together."""
    nonfinite, new = frozenset(nonfinite_steps), settings_dict(new)
    changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and k not in OUTSIDE_THE_STEP)
    found = []
    if new.get("steps", done) < done:
        found.append(
            Conflict("steps", old.get("steps"), new.get("steps"), done, "the snapshot is already past the last step")
        )
    for key in changed:
        if key == "steps" and found:
            continue
        diff = _first_difference(old, {**old, key: new.get(key)}, done, task_ndigit, nonfinite)
        if diff:
            found.append(Conflict(key, old.get(key), new.get(key), *diff))
    if not found and changed:
        diff = _first_difference(old, new, done, task_ndigit, nonfinite)
        if diff:
            keys = ", ".join(changed)
            found.append(Conflict(keys, {k: old.get(k) for k in changed}, {k: new.get(k) for k in changed}, *diff))
    return found


def evaluations_to_forget(old: Mapping, new: Mapping, done: int) -> list[int]:
    """Steps up to `done` evaluated under the old settings but not under the new ones (the
    old last step, typically): their eval_accuracy is dropped when the run resumes."""
    before, after = Schedule(old, 0), Schedule(new, 0)  # evaluation reads no digit count
    return [step for step in range(1, done + 1) if before.evaluated(step) and not after.evaluated(step)]
