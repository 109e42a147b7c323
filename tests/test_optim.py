"""mathrl.optim.AdamW against torch.optim.AdamW, and the startup cost it exists to avoid."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from mathrl.model import GPT, gpt_config
from mathrl.optim import AdamW


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
            opt.param_groups[0]["lr"] = lrs[step]
        opt.zero_grad(set_to_none=True)
        _loss(model, step).backward()
        opt.step()


@pytest.mark.parametrize("fused", [True, False])
def test_matches_torch_adamw(fused):
    """Bit-identical to torch's fused AdamW; within float rounding of its default (foreach) one."""
    kw = dict(lr=3e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)
    ours, ref = _model(), _model()
    lrs = [3e-3 * 0.8**i for i in range(6)]  # a schedule changing lr between steps
    _train(ours, AdamW(ours.parameters(), **kw), 6, lrs)
    _train(ref, torch.optim.AdamW(ref.parameters(), fused=fused, **kw), 6, lrs)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        if fused:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # lr 3e-3: rounding near eps, not a different update
    assert not torch.equal(next(ours.parameters()), next(_model().parameters())), "the weights never moved"


def test_parameters_without_gradient_keep_their_state():
    model = _model()
    opt = AdamW(model.parameters(), lr=1e-2)
    frozen = model.lm_head.weight if hasattr(model, "lm_head") else next(model.parameters())
    before = frozen.detach().clone()
    opt.zero_grad()
    _loss(model, 0).backward()
    frozen.grad = None
    opt.step()
    assert torch.equal(frozen, before)
    i = next(i for i, p in enumerate(opt.params) if p is frozen)
    assert float(opt.steps[i]) == 0.0 and float(opt.steps[(i + 1) % len(opt.steps)]) == 1.0


def test_state_dict_round_trip_resumes_exactly():
    a, b = _model(), _model()
    opt_a = AdamW(a.parameters(), lr=1e-2, weight_decay=0.1)
    _train(a, opt_a, 3)
    b.load_state_dict(a.state_dict())
    opt_b = AdamW(b.parameters(), lr=999.0)
    opt_b.load_state_dict(opt_a.state_dict())
    assert opt_b.param_groups[0]["lr"] == 1e-2
    _train(a, opt_a, 2)
    _train(b, opt_b, 2)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_refuses_foreign_state_and_bad_settings():
    opt = AdamW(_model().parameters())
    with pytest.raises(ValueError, match="mathrl.AdamW"):
        opt.load_state_dict(torch.optim.AdamW(_model().parameters()).state_dict())
    small = AdamW([torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(ValueError, match="shapes"):
        opt.load_state_dict(small.state_dict())
    with pytest.raises(ValueError, match="betas"):
        AdamW(_model().parameters(), betas=(0.9, 1.0))


def test_a_training_run_never_imports_dynamo(tmp_path):
    """The reason this module exists: torch.optim pulls in torch._dynamo (about 1.4 s a process)."""
    code = (
        "import sys; from mathrl.optim import AdamW; from mathrl.model import GPT, gpt_config; import torch\n"
        "m = GPT(gpt_config('small', 16, 12)); o = AdamW(m.parameters())\n"
        "m(torch.randint(16, (2, 12))).sum().backward(); o.step(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)\n"
        "print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
