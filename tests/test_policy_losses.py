"""The policy losses by hand, their registry, the metrics accumulator and the noise probe."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mathrl.engine import policy_losses as P
from mathrl.engine.distributed import Dist
from mathrl.engine.losses import aggregate, cispo_surrogate, dual_clip_surrogate, gspo_surrogate, moment_sums
from mathrl.engine.metrics import COLUMNS, GradNoiseProbe, StepMetrics
from mathrl.pipeline.config import load_schema
from mathrl.pipeline.settings import RunSettings

LOG = math.log


def close(actual: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected), rtol=1e-5, atol=1e-6)


def defaults(**changes) -> RunSettings:
    props = load_schema()["definitions"]["train"]["properties"]
    return dataclasses.replace(RunSettings.from_dict({k: spec.get("default") for k, spec in props.items()}), **changes)


# ------------------------------------------------------------------ GSPO


def test_gspo_clips_the_sequence_ratio_by_hand():
    # sequence 0: token log-ratios 0.1 and 0.3, mean 0.2, s = e^0.2 = 1.2214 > 1.1, A = +1: clipped at 1.1;
    # sequence 1: log-ratio 0 on its one real token (the junk 5.0 after its end is ignored), A = -2: s = 1
    old = torch.zeros(2, 2)
    logp = torch.tensor([[0.1, 0.3], [0.0, 5.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, clipped = gspo_surrogate(logp, old, adv, mask, 0.1, 0.1)
    assert loss[0].tolist() == pytest.approx([-1.1, -1.1])
    assert loss[1, 0].item() == pytest.approx(2.0)
    assert clipped.tolist() == [[True, True], [False, False]]
    (loss * mask).sum().backward()
    close(logp.grad, [[0.0, 0.0], [2.0, 0.0]])  # clipped: no gradient; else -A * s


def test_gspo_token_form_has_the_gradient_of_the_sequence_objective():
    torch.manual_seed(0)
    B, T = 6, 4
    old = -torch.rand(B, T)
    logp = (old + 0.05 * torch.randn(B, T)).requires_grad_()
    adv = torch.randn(B, 1).expand(B, T).contiguous()
    mask = torch.ones(B, T)
    mask[0, 2:] = 0
    loss, _ = gspo_surrogate(logp, old, adv, mask, 0.02, 0.03)
    aggregate(loss, mask, "sequence")[0].backward()
    token_form = logp.grad.clone()
    logp.grad = None
    s = torch.exp(((logp - old) * mask).sum(1) / mask.sum(1))  # (B,) the sequence ratio, with its gradient
    a = adv[:, 0]
    (-torch.minimum(s * a, s.clamp(0.98, 1.03) * a)).sum().backward()
    torch.testing.assert_close(token_form * mask, logp.grad * mask)


# ------------------------------------------------------------------ CISPO


def test_cispo_weights_logp_by_the_clipped_detached_ratio_by_hand():
    # token 0: ratio 0.5 / 0.25 = 2 clipped to 1.5, A = 2; token 1: ratio 1, A = -1
    logp = torch.tensor([[LOG(0.5), LOG(0.5)]], requires_grad=True)
    old = torch.tensor([[LOG(0.25), LOG(0.5)]])
    adv = torch.tensor([[2.0, -1.0]])
    loss, clipped = cispo_surrogate(logp, old, adv, 0.5)
    close(loss, [[-1.5 * 2 * LOG(0.5), 1 * LOG(0.5)]])
    assert clipped.tolist() == [[True, False]]
    loss.sum().backward()
    close(logp.grad, [[-3.0, 1.0]])  # the clipped token keeps a gradient, -w * A


# ------------------------------------------------------------------ dual-clip


def test_dual_clip_bounds_negative_advantages_by_hand():
    # ratios 4, 2, 0.5, 4 with A = -1, -1, -1, +1; eps 0.2, clip_ratio_c 3
    old = torch.zeros(1, 4)
    logp = torch.tensor([[LOG(4), LOG(2), LOG(0.5), LOG(4)]], requires_grad=True)
    adv = torch.tensor([[-1.0, -1.0, -1.0, 1.0]])
    loss, clipped, dual = dual_clip_surrogate(logp, old, adv, 0.2, 0.2, 3.0)
    # PPO's losses: 4 (unclipped, ratio above 1 + eps with A < 0), 2, 0.8 (clipped low), -1.2 (clipped high)
    close(loss, [[3.0, 2.0, 0.8, -1.2]])
    assert dual.tolist() == [[True, False, False, False]] and clipped.tolist() == [[False, False, True, True]]
    loss.sum().backward()
    close(logp.grad, [[0.0, 2.0, 0.0, 0.0]])  # bounded and clipped tokens: no gradient


# ------------------------------------------------------------------ the registry


def test_the_schema_names_exactly_the_registered_policy_losses():
    schema = load_schema()["definitions"]["train"]["properties"]["policy_loss"]
    assert sorted(schema["enum"]) == sorted(P.POLICY_LOSSES) and schema["default"] in P.POLICY_LOSSES
    with pytest.raises(ValueError, match="allowed: vanilla"):
        P.get_policy_loss("ppo2")
    with pytest.raises(ValueError, match="registered twice"):
        P.policy_loss("gspo")(P.gspo)


@pytest.mark.parametrize("name", sorted(P.POLICY_LOSSES))
def test_each_loss_reports_columns_of_metrics_csv_and_is_vanilla_at_ratio_one(name):
    torch.manual_seed(1)
    logp = -torch.rand(4, 3, requires_grad=True)
    adv = torch.randn(4, 1).expand(4, 3).contiguous()
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    x = P.PolicyLossInputs(logp, logp.detach(), adv, mask, defaults(), seed=3)
    loss, diagnostics = P.get_policy_loss(name)(x)
    assert loss.shape == (4, 3) and set(diagnostics) <= set(COLUMNS)
    assert all(d.shape in {(4, 3), (4,)} for d in diagnostics.values())
    if name not in ("clip_cov", "kl_cov"):  # at ratio 1 (one update per batch) the gradient is REINFORCE's
        (grad,) = torch.autograd.grad(aggregate(loss, mask, "token")[0], logp)
        torch.testing.assert_close(grad * mask, -adv * mask)


def test_the_new_losses_read_their_own_settings():
    logp = torch.tensor([[LOG(0.5), LOG(0.5)]], requires_grad=True)
    old = torch.tensor([[LOG(0.25), LOG(0.5)]])  # ratios 2 and 1
    adv, mask = torch.tensor([[-1.0, -1.0]]), torch.ones(1, 2)

    def run(name, **settings):
        return P.get_policy_loss(name)(P.PolicyLossInputs(logp, old, adv, mask, defaults(**settings)))[1]

    assert run("cispo", cispo_clip_high=0.5)["is_clip_frac"].tolist() == [[True, False]]
    assert run("cispo", cispo_clip_high=1.5)["is_clip_frac"].tolist() == [[False, False]]
    assert run("dual_clip", clip_ratio_c=1.5)["dual_clip_frac"].tolist() == [[True, False]]
    assert run("dual_clip", clip_ratio_c=2.5)["dual_clip_frac"].tolist() == [[False, False]]
    # sequence ratio sqrt(2) = 1.41 with A < 0: GSPO's min takes the unclipped side, nothing is cut
    assert run("gspo", gspo_clip_low=0.1, gspo_clip_high=0.1)["seq_clip_frac"].tolist() == [False]
    old_high = torch.tensor([[LOG(1.0), LOG(1.0)]])  # ratio 0.5 on both tokens: below 1 - 0.1, A < 0: cut
    d = P.gspo(P.PolicyLossInputs(logp, old_high, adv, mask, defaults(gspo_clip_low=0.1)))[1]
    assert d["seq_clip_frac"].tolist() == [True] and d["clip_frac_low"].tolist() == [[True, True]]


# ------------------------------------------------------------------ the metrics accumulator


def test_step_metrics_add_up_micro_batches_and_fill_every_column():
    one = Dist()
    m = StepMetrics()
    m.value("step", 3)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    m.masked_mean("entropy", torch.tensor([[1.0, 2.0], [3.0, 100.0]]), mask)  # 6 over 3 tokens
    m.masked_mean("entropy", torch.tensor([[4.0, 0.0]]), torch.tensor([[1.0, 0.0]]))  # + 4 over 1
    m.masked_mean("seq_clip_frac", torch.tensor([True, False, False, True]), mask)  # per sequence: 2 of 4
    m.divided("policy_loss", 1.0, 8.0)
    m.divided("policy_loss", 3.0, 8.0)
    m.maximum("adv_abs_max", 2.0)
    m.maximum("adv_abs_max", 1.0)
    m.moments(moment_sums(torch.tensor([[1.0, 3.0]]), torch.tensor([[2.0, 6.0]]), torch.ones(1, 2)), cov="logp_adv_cov")
    row = m.reduce(one)
    assert list(row) == COLUMNS and row["step"] == 3
    assert row["entropy"] == 10 / 4 and row["seq_clip_frac"] == 0.5 and row["policy_loss"] == 0.5
    assert row["adv_abs_max"] == 2.0 and row["logp_adv_cov"] == pytest.approx(2.0)  # E[xy] - E[x]E[y] = 10 - 8
    assert math.isnan(row["value_loss"]) and math.isnan(row["adv_mean"])  # not recorded: NaN
    with pytest.raises(KeyError, match="entropyy"):
        m.value("entropyy", 1.0)


def test_every_column_is_named_where_it_is_computed():
    """Each column of metrics.csv is named as a string literal by the code that writes the row
    (the trainer, the policy losses, the mismatch diagnostics, the noise probe), besides its declaration in COLUMNS: no
    declared column is left that nothing computes."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent / "mathrl" / "engine"
    literals = set()
    for name in ("trainer.py", "policy_losses.py", "mismatch.py", "metrics.py"):
        tree = ast.parse((package / name).read_text())
        declared = {id(n) for a in tree.body if isinstance(a, ast.Assign) for n in ast.walk(a.value)}
        literals |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and id(n) not in declared}  # fmt: skip
    assert [c for c in COLUMNS if c not in literals] == []


def test_noise_probe_takes_each_micro_batch_gradient_at_its_own_scale():
    p = torch.nn.Parameter(torch.zeros(2))
    probe = GradNoiseProbe([p], micro_size=2, batch_size=4, divisor=4.0)
    p.grad = torch.tensor([1.0, 0.0])  # the first half's share of the batch mean
    probe.observe(2.0)
    p.grad = torch.tensor([2.0, 1.0])  # accumulated: the second half added [1, 1]
    probe.observe(2.0)
    m = StepMetrics()
    probe.record(m)
    row = m.reduce(Dist())
    # own gradients at their own mean: 2 * [1, 0] and 2 * [1, 1]: |.|^2 = 4 and 8; the batch's |[2, 1]|^2 = 5;
    # |G|^2 = (4 * 5 - 2 * 6) / 2 = 4, tr(Sigma) = (6 - 5) / (1/2 - 1/4) = 4
    assert row["grad_sq_micro"] == 6.0 and row["grad_sq_batch"] == 5.0 and row["grad_noise_scale"] == 1.0


def test_each_new_loss_trains_and_logs_its_own_clip(run_env):
    import pandas as pd

    from mathrl.pipeline.cli import main

    own = {"gspo": "seq_clip_frac", "cispo": "is_clip_frac", "dual_clip": "dual_clip_frac"}
    # settings under which each clip binds on the second PPO epoch of the tiny task
    binding = {"gspo": ["loss_agg=sequence"], "cispo": ["cispo_clip_high=0.001"], "dual_clip": ["clip_ratio_c=1.0001"]}
    for name, column in own.items():
        argv = ["train", "--config", str(run_env["config"]), "--run-id", name, "steps=3", "ppo_epochs=2",
                f"policy_loss={name}", *binding[name]]  # fmt: skip
        assert main(argv) == 0
        df = pd.read_csv(run_env["results"] / "runs" / name / "metrics.csv")
        assert df[column].between(0, 1).all() and (df[column] > 0).any(), name
        for other in set(own.values()) - {column}:
            assert df[other].isna().all(), (name, other)
        assert df["clip_frac"].isna().all() == (name == "cispo")  # CISPO removes no token's gradient
        assert df["cov_frac"].isna().all() and df["grad_norm"].notna().all()
