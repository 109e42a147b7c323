"""Tests of mathrl.engine.model: shapes, weight tying, KV-cache sampling against full recomputation,
the Gumbel-max sampler, presets and the value head."""

import pytest
import torch

from mathrl.engine.model import GPT, PRESETS, GPTConfig, ValueHead, gpt_config

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
    ref, ref_logits = model.generate_naive(idx, n_new, noise=noise, greedy=greedy, return_logits=True)
    assert out.shape == (B, n_new) and out.dtype == torch.long
    assert torch.equal(out, ref)
    assert out.min() >= 0 and out.max() < V
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=0)
    # and against one full forward over prompt + answer
    full = model(torch.cat([idx, out], dim=1))[:, P - 1 : P + n_new - 1]  # (B, n_new, V)
    torch.testing.assert_close(logits, full, atol=1e-5, rtol=0)
    # the plain call returns the same tokens
    assert torch.equal(model.generate(idx, n_new, noise=noise, greedy=greedy), out)


@pytest.mark.parametrize("greedy", [False, True])
def test_matches_is_generate_compared_with_the_target(greedy):
    """Rows whose target is generate's own answer match; a row whose target differs at token k (k = 0..L-1)
    does not, whichever token it is; and with every row wrong at its first token the loop stops early."""
    model = small_model(seed=3)
    with torch.no_grad():
        model.lm_head.weight.mul_(10)
    B, P, L = 40, 6, 5
    idx = prompts(B, P, seed=4)
    noise = torch.rand(B, L, V, generator=torch.Generator().manual_seed(5))
    out = model.generate(idx, L, noise=noise, greedy=greedy)
    target = out.clone()
    wrong_at = torch.arange(B) % (L + 3)  # L, L+1, L+2: left right
    for row, k in enumerate(wrong_at.tolist()):
        if k < L:
            target[row, k] = (target[row, k] + 1) % V
    want = wrong_at >= L
    assert torch.equal(model.matches(idx, target, noise=noise, greedy=greedy), want)
    assert torch.equal(want, (out == target).all(dim=1))
    target[:, 0] = (out[:, 0] + 1) % V
    assert not model.matches(idx, target, noise=noise, greedy=greedy).any()


def test_generate_up_to_block_size_and_too_long():
    model = small_model()
    idx = prompts(4, 10)
    noise = torch.rand(4, BLOCK - 10, V)
    assert torch.equal(model.generate(idx, BLOCK - 10, noise=noise), model.generate_naive(idx, BLOCK - 10, noise=noise))
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
    approx = 12 * cfg.n_layer * cfg.n_embd**2
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


# ---------------------------------------------------------------- prefix sharing

SHARED_SHAPES = [(1, 1, 8, 5), (3, 4, 8, 5), (5, 8, 6, 4), (2, 3, 1, 6), (4, 2, 10, 6), (2, 8, 8, 1)]  # (N, G, P, L)


def shared_batch(N, G, P, L, seed=0):
    gen = torch.Generator().manual_seed(seed)
    uniq = torch.randint(0, V, (N, P), generator=gen)  # (N, P) distinct prompts
    answers = torch.randint(0, V, (N * G, L), generator=gen)  # (N*G, L), grouped by prompt
    full = torch.cat([uniq.repeat_interleave(G, dim=0), answers], dim=1)[:, :-1]  # (N*G, P+L-1)
    return uniq, answers, full


def test_prefix_tree_mask():
    from mathrl.engine.model import prefix_tree_mask

    m = prefix_tree_mask(2, 2, 2).int()  # prompt p0 p1, answer a: a0 a1, answer b: b0 b1
    assert m.tolist() == [
        [1, 0, 0, 0, 0, 0],  # p0
        [1, 1, 0, 0, 0, 0],  # p1
        [1, 1, 1, 0, 0, 0],  # a0
        [1, 1, 1, 1, 0, 0],  # a1
        [1, 1, 0, 0, 1, 0],  # b0: the prompt and itself, never answer a
        [1, 1, 0, 0, 1, 1],  # b1
    ]


@pytest.mark.parametrize("N,G,P,L", SHARED_SHAPES)
def test_forward_shared_equals_full_forward(N, G, P, L):
    model = small_model(seed=N + G)
    uniq, answers, full = shared_batch(N, G, P, L, seed=P)
    ref_logits, ref_hidden = model(full, return_hidden=True)
    logits, hidden = model.forward_shared(uniq, answers, G, return_hidden=True)
    assert logits.shape == (N * G, L, V) and hidden.shape == (N * G, L, 32)
    torch.testing.assert_close(logits, ref_logits[:, P - 1 :], atol=1e-5, rtol=0)
    torch.testing.assert_close(hidden, ref_hidden[:, P - 1 :], atol=1e-5, rtol=0)
    torch.testing.assert_close(model.forward_shared(uniq, answers, G), logits, atol=0, rtol=0)
    # the values the PPO head reads at the same positions
    head = ValueHead(32)
    with torch.no_grad():
        head.v.weight.normal_()
    torch.testing.assert_close(head(hidden), head(ref_hidden)[:, P - 1 :], atol=1e-5, rtol=0)


def test_forward_shared_does_not_mix_answers():
    """Answer g of a group sees only the prompt and itself: changing answer 0 leaves the
    others' logits unchanged, and a later token never changes earlier logits."""
    model = small_model()
    uniq, answers, _ = shared_batch(2, 4, 8, 5)
    base = model.forward_shared(uniq, answers, 4)
    changed = answers.clone()
    changed[0] = (changed[0] + 1) % V  # answer 0 of prompt 0
    changed[5, 3:] = (changed[5, 3:] + 1) % V  # the tail of answer 1 of prompt 1
    out = model.forward_shared(uniq, changed, 4)
    torch.testing.assert_close(out[1:5], base[1:5], atol=1e-6, rtol=0)
    torch.testing.assert_close(out[6:], base[6:], atol=1e-6, rtol=0)
    torch.testing.assert_close(out[5, :4], base[5, :4], atol=1e-6, rtol=0)  # logits up to token 3 predict 0..3
    assert not torch.allclose(out[0], base[0])


@pytest.mark.parametrize("N,G,P,L", SHARED_SHAPES)
def test_forward_shared_gradients_equal_full_forward(N, G, P, L):
    """The prompt is computed once and used G times: autograd sums its G contributions, so
    every parameter's gradient equals the one through the full sequences."""
    model = small_model(seed=3).train()
    head = ValueHead(32)
    with torch.no_grad():
        head.v.weight.normal_(std=0.1)
    uniq, answers, full = shared_batch(N, G, P, L, seed=5)
    weights = torch.randn(N * G, L, generator=torch.Generator().manual_seed(6))

    def loss_of(logits, hidden):
        logp = torch.log_softmax(logits, -1).gather(-1, answers[..., None]).squeeze(-1)  # (B, L)
        return (weights * logp).mean() + 0.5 * head(hidden).pow(2).mean()

    def grads(loss):
        model.zero_grad()
        head.zero_grad()
        loss.backward()
        params = list(model.named_parameters()) + list(head.named_parameters())
        return {name: p.grad.clone() for name, p in params}

    logits, hidden = model(full, return_hidden=True)
    ref = grads(loss_of(logits[:, P - 1 :], hidden[:, P - 1 :]))
    got = grads(loss_of(*model.forward_shared(uniq, answers, G, return_hidden=True)))
    assert ref.keys() == got.keys()
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], atol=1e-5, rtol=0, msg=name)


def test_forward_shared_micro_batches_on_group_boundaries():
    model = small_model()
    uniq, answers, _ = shared_batch(6, 4, 8, 5)
    whole = model.forward_shared(uniq, answers, 4)
    parts = torch.cat([model.forward_shared(uniq[i : i + 2], answers[4 * i : 4 * i + 8], 4) for i in range(0, 6, 2)])
    torch.testing.assert_close(parts, whole, atol=1e-6, rtol=0)


def test_forward_shared_errors():
    model = small_model()
    uniq, answers, _ = shared_batch(2, 4, 8, 5)
    with pytest.raises(ValueError, match="group_size"):
        model.forward_shared(uniq, answers, 3)
    with pytest.raises(ValueError, match="at least one"):
        model.forward_shared(uniq, answers[:, :0], 4)


@pytest.mark.parametrize("G", [1, 3, 8])
@pytest.mark.parametrize("greedy", [False, True])
def test_generate_group_size_equals_repeated_prompts(G, greedy):
    model = small_model(seed=G)
    with torch.no_grad():
        model.lm_head.weight.mul_(10)  # sharp logits: sampling is not near-uniform
    N, P, n_new = 5, 8, 6
    uniq = prompts(N, P, seed=G)
    noise = torch.rand(N * G, n_new, V, generator=torch.Generator().manual_seed(G))
    ref, ref_logits = model.generate(
        uniq.repeat_interleave(G, dim=0), n_new, noise=noise, greedy=greedy, return_logits=True
    )
    out, logits = model.generate(uniq, n_new, noise=noise, greedy=greedy, return_logits=True, group_size=G)
    assert out.shape == (N * G, n_new)
    assert torch.equal(out, ref)
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=0)
    assert torch.equal(model.generate_naive(uniq, n_new, noise=noise, greedy=greedy, group_size=G), out)
    # the sampled answers' logits through the shared-prefix forward
    torch.testing.assert_close(model.forward_shared(uniq, out, G), logits, atol=1e-5, rtol=0)
    if not greedy:
        with pytest.raises(ValueError, match="noise"):
            model.generate(uniq, n_new, noise=noise[:N], group_size=G + 1)
