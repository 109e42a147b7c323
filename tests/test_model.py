"""Tests of mathrl.model: shapes, weight tying, KV-cache sampling against full recomputation,
the Gumbel-max sampler, presets and the value head."""

import pytest
import torch

from mathrl.model import GPT, PRESETS, GPTConfig, ValueHead, gpt_config

V, BLOCK = 14, 16


def small_model(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=V, block_size=BLOCK, n_layer=2, n_head=4, n_embd=32, **kw)
    return GPT(cfg).eval()


def prompts(B, P=8, seed=1):
    return torch.randint(0, V, (B, P), generator=torch.Generator().manual_seed(seed))


def test_forward_shapes_and_hidden():
    model = small_model()
    idx = prompts(3, 10)
    logits = model(idx)
    assert logits.shape == (3, 10, V)
    logits2, hidden = model(idx, return_hidden=True)
    assert hidden.shape == (3, 10, 32)
    torch.testing.assert_close(logits, logits2)
    # hidden is the final-LayerNorm output and the logits are read from it
    torch.testing.assert_close(model.lm_head(hidden), logits)


def test_weights_tied():
    model = small_model()
    assert model.lm_head.weight is model.transformer.wte.weight
    n_unique = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    assert model.num_params() == n_unique


def test_forward_is_causal():
    model = small_model()
    idx = prompts(2, 10)
    idx2 = idx.clone()
    idx2[:, 6:] = (idx2[:, 6:] + 1) % V
    torch.testing.assert_close(model(idx)[:, :6], model(idx2)[:, :6])


@pytest.mark.parametrize("B", [1, 3, 64])
@pytest.mark.parametrize("greedy", [False, True])
def test_kv_cache_matches_full_recomputation(B, greedy):
    model = small_model(seed=B)
    # sharpen the logits so that sampling is not near-uniform
    with torch.no_grad():
        model.lm_head.weight.mul_(10)
    P, n_new = 8, 6
    idx = prompts(B, P, seed=B)
    noise = torch.rand(B, n_new, V, generator=torch.Generator().manual_seed(B))
    out, logits = model.generate(idx, n_new, noise=noise, greedy=greedy, return_logits=True)
    ref, ref_logits = model.generate_naive(idx, n_new, noise=noise, greedy=greedy,
                                           return_logits=True)
    assert out.shape == (B, n_new) and out.dtype == torch.long
    assert torch.equal(out, ref)
    assert out.min() >= 0 and out.max() < V
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=0)
    # and against one full forward over prompt + answer
    full = model(torch.cat([idx, out], dim=1))[:, P - 1:P + n_new - 1]  # (B, n_new, V)
    torch.testing.assert_close(logits, full, atol=1e-5, rtol=0)
    # the plain call returns the same tokens
    assert torch.equal(model.generate(idx, n_new, noise=noise, greedy=greedy), out)


def test_generate_up_to_block_size_and_too_long():
    model = small_model()
    idx = prompts(4, 10)
    noise = torch.rand(4, BLOCK - 10, V)
    assert torch.equal(model.generate(idx, BLOCK - 10, noise=noise),
                       model.generate_naive(idx, BLOCK - 10, noise=noise))
    with pytest.raises(ValueError, match="block_size"):
        model.generate(idx, BLOCK - 9)
    with pytest.raises(ValueError, match="noise"):
        model.generate(idx, 3, noise=torch.rand(4, 2, V))


def test_generate_without_noise_draws_from_torch_rand():
    model = small_model()
    idx = prompts(5)
    torch.manual_seed(7)
    a = model.generate(idx, 4)
    torch.manual_seed(7)
    b = model.generate(idx, 4, noise=torch.rand(5, 4, V))
    assert torch.equal(a, b)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_gumbel_sampler_matches_softmax(temperature):
    model = small_model()
    with torch.no_grad():
        model.lm_head.weight.mul_(10)
    N = 20000
    idx = prompts(1).expand(N, -1)
    probs = torch.softmax(model(idx[:1])[0, -1] / temperature, dim=-1)
    assert probs.max() > 0.15  # the check is not against a near-uniform distribution
    noise = torch.rand(N, 1, V, generator=torch.Generator().manual_seed(3))
    tok = model.generate(idx, 1, temperature=temperature, noise=noise)[:, 0]
    freq = torch.bincount(tok, minlength=V).float() / N
    assert (freq - probs).abs().max() < 0.02


def test_low_temperature_is_greedy():
    model = small_model()
    idx = prompts(32)
    noise = torch.rand(32, 5, V, generator=torch.Generator().manual_seed(4))
    greedy = model.generate(idx, 5, greedy=True)
    assert torch.equal(model.generate(idx, 5, temperature=1e-6, noise=noise), greedy)
    assert torch.equal(model.generate(idx, 5, temperature=0.0, noise=noise), greedy)
    assert torch.equal(model.generate_naive(idx, 5, greedy=True), greedy)
    # greedy is the argmax of the model's own logits
    full = model(torch.cat([idx, greedy], dim=1))[:, 7:12]
    assert torch.equal(full.argmax(-1), greedy)


def test_gpt_config_presets_and_errors():
    cfg = gpt_config("adder", vocab_size=V, block_size=12)
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd) == (4, 8, 256)
    assert (cfg.vocab_size, cfg.block_size) == (V, 12)
    with pytest.raises(ValueError) as e:
        gpt_config("huge", V, 12)
    for name in PRESETS:
        assert name in str(e.value)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_param_counts(preset):
    cfg = gpt_config(preset, vocab_size=V, block_size=16)
    n = GPT(cfg).num_params()
    approx = 12 * cfg.n_layer * cfg.n_embd ** 2
    assert 0.95 * approx < n < 1.1 * approx
    if preset == "adder":
        assert 3.0e6 < n < 3.4e6


def test_value_head():
    model = small_model()
    head = ValueHead(32)
    logits, hidden = model(prompts(3, 9), return_hidden=True)
    values = head(hidden)
    assert values.shape == (3, 9)
    assert torch.equal(values, torch.zeros(3, 9))
    # value gradients reach the shared trunk once the head is non-zero
    with torch.no_grad():
        head.v.weight.fill_(0.1)
    model.train()
    model.zero_grad()
    _, hidden = model(prompts(3, 9), return_hidden=True)
    head(hidden).pow(2).sum().backward()
    assert model.transformer.h[0].attn.c_attn.weight.grad.abs().sum() > 0
