"""make_optimizer: torch's AdamW (fused) and SGD, checked against small cases by hand."""

from __future__ import annotations

import pytest
import torch

from mathrl.engine import snapshot
from mathrl.engine.model import GPT, gpt_config
from mathrl.engine.optim import make_optimizer, set_lr


def _model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(gpt_config("small", 16, 12))


def _loss(model: GPT, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    x = torch.randint(16, (8, 12), generator=g)
    return model(x).logsumexp(-1).mean()


def _train(model: GPT, opt, steps: int, lrs=None) -> None:
    for step in range(steps):
        if lrs is not None:
            set_lr(opt, lrs[step])
        opt.zero_grad(set_to_none=True)
        _loss(model, step).backward()
        opt.step()


def test_adamw_is_fused_and_matches_the_loop_implementation():
    """The fused kernel changes how, not what: within float rounding of torch's foreach AdamW."""
    kw = dict(lr=3e-3, betas=(0.9, 0.99), weight_decay=0.05)
    ours, ref = _model(), _model()
    opt = make_optimizer(ours.parameters(), "adamw", **kw)
    assert opt.defaults["fused"] is True
    lrs = [3e-3 * 0.8**i for i in range(6)]  # a schedule changing lr between steps
    _train(ours, opt, 6, lrs)
    _train(ref, torch.optim.AdamW(ref.parameters(), foreach=False, eps=1e-8, **kw), 6, lrs)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
    assert not torch.equal(next(ours.parameters()), next(_model().parameters())), "the weights never moved"


def test_adamw_first_step_by_hand():
    """Step 1 of AdamW: m = (1-b1) g, v = (1-b2) g^2, bias-corrected m/sqrt(v) = sign(g); decay lr*wd*p first."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = make_optimizer([p], "adamw", lr=0.1, weight_decay=0.5, betas=(0.9, 0.99))
    p.grad = torch.tensor([3.0, -0.5])
    opt.step()
    expected = torch.tensor([1.0, -2.0]) * (1 - 0.1 * 0.5) - 0.1 * torch.tensor(
        [1.0, -1.0]
    )  # eps 1e-8 is below rounding
    torch.testing.assert_close(p.detach(), expected)


def test_sgd_with_momentum_by_hand():
    """v1 = g1, p1 = p0 - lr v1; v2 = m v1 + g2, p2 = p1 - lr v2 (L2 decay adds wd * p to g)."""
    p = torch.nn.Parameter(torch.tensor([1.0]))
    opt = make_optimizer([p], "sgd", lr=0.1, momentum=0.5, weight_decay=0.0)
    for g in (2.0, 4.0):
        p.grad = torch.tensor([g])
        opt.step()
    # v1 = 2 -> p = 0.8; v2 = 0.5 * 2 + 4 = 5 -> p = 0.8 - 0.5 = 0.3
    torch.testing.assert_close(p.detach(), torch.tensor([0.3]))
    q = torch.nn.Parameter(torch.tensor([1.0]))
    opt = make_optimizer([q], "sgd", lr=0.1, weight_decay=0.5)
    q.grad = torch.tensor([2.0])
    opt.step()
    torch.testing.assert_close(q.detach(), torch.tensor([1.0 - 0.1 * (2.0 + 0.5 * 1.0)]))


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_state_dict_round_trip_resumes_exactly(name):
    a, b = _model(), _model()
    opt_a = make_optimizer(a.parameters(), name, lr=1e-2, weight_decay=0.1, momentum=0.9)
    _train(a, opt_a, 3)
    b.load_state_dict(a.state_dict())
    opt_b = make_optimizer(b.parameters(), name, lr=999.0, momentum=0.9)
    # through a snapshot's bytes, as a resumed run gets it (load_state_dict keeps the tensors it is given)
    opt_b.load_state_dict(snapshot.decode(snapshot.encode(opt_a.state_dict()), "test"))
    assert opt_b.param_groups[0]["lr"] == 1e-2
    _train(a, opt_a, 2)
    _train(b, opt_b, 2)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_frozen_parameters_are_left_out_and_unknown_names_refused():
    model = _model()
    frozen = next(model.parameters())
    frozen.requires_grad_(False)
    opt = make_optimizer(model.parameters(), "adamw", lr=1e-3)
    assert all(p is not frozen for g in opt.param_groups for p in g["params"])
    with pytest.raises(ValueError, match="allowed: adamw, sgd"):
        make_optimizer(model.parameters(), "adam", lr=1e-3)
