"""
A tiny GPT in the style of karpathy/nanoGPT, with KV-cache sampling and a PPO value head.

The model is a pre-LayerNorm decoder-only transformer with learned position embeddings and
an lm_head tied to the token embedding. `GPT.generate` samples answers autoregressively with
a per-layer key/value cache and a Gumbel-max sampler driven by caller-supplied uniform noise,
so the caller controls randomness exactly (see docs/ARCHITECTURE.md, "Randomness and DDP").

RL batches hold groups of G rollouts of one prompt. In a causal transformer the prompt's
hidden states, keys and values do not depend on the answer, so `GPT.forward_shared` and
`GPT.generate(..., group_size=G)` compute each distinct prompt once and let its G answers
attend to the shared keys/values (docs/ARCHITECTURE.md, "Prefix sharing").
"""

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 14  # tokens: digits 0-9, '+', '*', '=', '$'
    block_size: int = 16  # longest sequence (prompt + answer) the model can attend over
    n_layer: int = 2  # number of transformer blocks
    n_head: int = 4  # attention heads per block
    n_embd: int = 128  # residual stream width; must be divisible by n_head
    dropout: float = 0.0  # dropout on attention weights and residual branches (0 for RL)
    bias: bool = True  # biases in Linear layers and LayerNorms


PRESETS = {
    "small": dict(n_layer=2, n_head=4, n_embd=128),
    "adder": dict(n_layer=4, n_head=8, n_embd=256),
    "multiplier": dict(n_layer=6, n_head=8, n_embd=256),
}


def gpt_config(preset: str, vocab_size: int, block_size: int) -> GPTConfig:
    """Build the GPTConfig of a named preset ("small", "adder", "multiplier")."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; allowed: {', '.join(sorted(PRESETS))}")
    return GPTConfig(vocab_size=vocab_size, block_size=block_size, **PRESETS[preset])


class KVCache:
    """Key/value buffers of one attention layer, shape (B, nh, max_len, hs), filled in place.

    The buffers are allocated once, on the first write, with the dtype and device of the
    keys (so bf16 autocast gets a bf16 cache); later writes only copy into them.
    """

    def __init__(self, max_len: int):
        self.max_len = max_len
        self.k = self.v = None

    def update(self, k, v, pos: int):
        """Store k, v (B, nh, T, hs) at positions pos..pos+T-1; return all keys/values so far."""
        B, nh, T, hs = k.shape
        if self.k is None:
            self.k = k.new_empty(B, nh, self.max_len, hs)  # (B, nh, L, hs)
            self.v = v.new_empty(B, nh, self.max_len, hs)  # (B, nh, L, hs)
        self.k[:, :, pos : pos + T] = k
        self.v[:, :, pos : pos + T] = v
        return self.k[:, :, : pos + T], self.v[:, :, : pos + T]  # (B, nh, pos+T, hs) views

    def keep_rows(self, rows: torch.Tensor):
        """Keep only the given rows (a 1-D index tensor) of the buffers, in that order."""
        self.k, self.v = self.k[rows], self.v[rows]

    def repeat_rows(self, group_size: int, upto: int):
        """Give each row group_size consecutive copies (rows r*G .. r*G+G-1 copy row r) of
        its first `upto` positions: (B, nh, L, hs) -> (B*G, nh, L, hs)."""
        B, nh, L, hs = self.k.shape
        k = self.k.new_empty(B * group_size, nh, L, hs)
        v = self.v.new_empty(B * group_size, nh, L, hs)
        k.view(B, group_size, nh, L, hs)[:, :, :, :upto] = self.k[:, None, :, :upto]
        v.view(B, group_size, nh, L, hs)[:, :, :, :upto] = self.v[:, None, :, :upto]
        self.k, self.v = k, v


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout

    def forward(self, x, cache: KVCache | None = None, pos: int = 0, last_only: bool = False):
        """Full causal attention over x (cache None), or attention over a KV cache.

        With a cache, x holds positions pos..pos+T-1: either the whole prompt (pos == 0,
        causal) or a single new token (T == 1), which may attend to every cached position,
        so it needs no mask. last_only: keys and values of every position (for the cache),
        but the output of the last position only, (B, 1, C).
        """
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        if last_only:
            q = q[:, -1:]  # the last query sees every position: no mask needed
        q = q.reshape(B, q.size(1), self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, Tq, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        if cache is not None:
            assert pos == 0 or T == 1, "cached attention: prefill at pos 0, then one token a step"
            k, v = cache.update(k, v, pos)  # (B, nh, pos+T, hs)
        Tq = q.size(2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=Tq > 1
        )  # (B, nh, Tq, hs)
        y = y.transpose(1, 2).contiguous().view(B, Tq, C)  # (B, Tq, C)
        return self.resid_dropout(self.c_proj(y))

    def forward_masked(self, x, mask, start: int = 0):
        """Attention over x (B, S, C) under an explicit boolean mask (S, S) (True: may
        attend), for the queries at positions start..S-1 only: (B, S-start, C)."""
        B, S, C = x.size()
        nh, hs = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q[:, start:]  # (B, T, C)
        T = S - start
        y = F.scaled_dot_product_attention(
            q.reshape(B, T, nh, hs).transpose(1, 2),
            k.view(B, S, nh, hs).transpose(1, 2),
            v.view(B, S, nh, hs).transpose(1, 2),
            attn_mask=mask[start:],
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))  # (B, T, C)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, cache: KVCache | None = None, pos: int = 0, last_only: bool = False):
        a = self.attn(self.ln_1(x), cache, pos, last_only)  # (B, T or 1, C)
        x = (x[:, -1:] if last_only else x) + a  # (B, T or 1, C)
        x = x + self.mlp(self.ln_2(x))  # (B, T or 1, C)
        return x

    def forward_masked(self, x, mask, start: int = 0):
        """The block over x (B, S, C) with attention under mask (S, S); returns positions
        start..S-1 only, (B, S-start, C)."""
        x = x[:, start:] + self.attn.forward_masked(self.ln_1(x), mask, start)
        x = x + self.mlp(self.ln_2(x))
        return x


@functools.lru_cache(maxsize=64)
def prefix_tree_mask(P: int, G: int, La: int, device: str = "cpu") -> torch.Tensor:
    """Attention mask (S, S), S = P + G*La, of the prefix tree that GPT.forward_shared lays
    out per prompt: its P tokens, then G answers of La tokens each. A prompt position sees
    the prompt causally; answer g's position t sees the whole prompt and its own answer's
    positions 0..t (never another answer's)."""
    S = P + G * La
    mask = torch.zeros(S, S, dtype=torch.bool)
    mask[:, :P] = True
    mask[:P, :P] = torch.ones(P, P, dtype=torch.bool).tril()
    causal = torch.ones(La, La, dtype=torch.bool).tril()
    for g in range(G):
        lo = P + g * La
        mask[lo : lo + La, lo : lo + La] = causal
    return mask.to(device)


def truncate_logits(logits, top_k: int = 0, top_p: float = 1.0):
    """Truncated sampling: logits (..., V) with -inf outside the top_k largest (0: no limit; ties at the k-th kept) and
    outside the nucleus, the fewest most likely tokens whose probability reaches top_p (1.0: no
    limit; the token that crosses top_p is kept). Sampling from the result samples the truncated
    distribution renormalised. Unchanged (the same tensor) when neither limit is set."""
    if top_k > 0 and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.float().softmax(-1)
        before = probs.cumsum(-1) - probs  # probability of the more likely tokens
        drop_sorted = before >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _gumbel(noise):
    """Gumbel(0, 1) noise g = -log(-log(u)) from uniform u in [0, 1)."""
    return -torch.log(-torch.log(noise))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        """Number of parameters (the tied embedding counted once)."""
        return sum(p.numel() for p in self.parameters())

    def _trunk(self, idx, caches=None, pos: int = 0, last_only: bool = False):
        """Hidden states after the final LayerNorm for tokens idx at positions pos..pos+T-1
        (B, T, C); last_only: of the last position only (B, 1, C), which in the last block
        skips the attention output and MLP of the others (their keys and values are still
        cached)."""
        B, T = idx.size()
        assert pos + T <= self.config.block_size, (
            f"sequence of length {pos + T} exceeds block_size {self.config.block_size}"
        )
        tok_emb = self.transformer.wte(idx)  # (B, T, C)
        pos_emb = self.transformer.wpe.weight[pos : pos + T]  # (T, C)
        x = self.transformer.drop(tok_emb + pos_emb)  # (B, T, C)
        last = len(self.transformer.h) - 1
        for i, block in enumerate(self.transformer.h):
            x = block(x, None if caches is None else caches[i], pos, last_only and i == last)  # (B, T, C)
        return self.transformer.ln_f(x)  # (B, T or 1, C)

    def forward(self, idx, return_hidden: bool = False):
        """Logits (B, T, V) for tokens idx (B, T); with return_hidden also the final
        LayerNorm output (B, T, C), which the PPO value head reads."""
        hidden = self._trunk(idx)  # (B, T, C)
        logits = self.lm_head(hidden)  # (B, T, V)
        return (logits, hidden) if return_hidden else logits

    def forward_shared(self, prompts, answers, group_size: int, return_hidden: bool = False):
        """The logits that predict each answer token, computing every prompt once per group.

        prompts (N, P): distinct prompts; answers (N*G, L): G answers per prompt, grouped
        (rows i*G .. i*G+G-1 answer prompt i), G = group_size. Returns logits (N*G, L, V)
        where [:, t] predicts answers[:, t] (t = 0 from the last prompt position), equal up to
        float rounding to

            forward(cat([prompts.repeat_interleave(G, 0), answers], 1)[:, :-1])[:, P-1:]

        at about (P/T)(1 - 1/G) fewer FLOPs, forward and backward: the prompt's hidden
        states, keys and values do not depend on the answer (causal attention), so they are
        computed for N rows, not N*G, and autograd sums the G uses of each in the backward.
        With return_hidden also the final-LayerNorm output at those positions (N*G, L, C),
        for the value head. (With dropout > 0 in training the G answers of a prompt share
        its dropout draws; the RL trainer runs without dropout.)
        """
        N, P = prompts.shape
        B, L = answers.shape
        G = group_size
        if G < 1 or B != N * G:
            raise ValueError(f"answers has {B} rows; expected {N} prompts x group_size {G}")
        if L < 1:
            raise ValueError("answers must hold at least one token")
        assert P + L - 1 <= self.config.block_size, (
            f"sequence of length {P + L - 1} exceeds block_size {self.config.block_size}"
        )
        La = L - 1
        # One "prefix tree" sequence per prompt: its P tokens at positions 0..P-1, then its G
        # answers' first L-1 tokens, each at positions P..P+L-2; the mask keeps the answers
        # apart, so every Linear of a layer runs once over N*(P + G*(L-1)) rows.
        tok = torch.cat([prompts, answers[:, :La].reshape(N, G * La)], dim=1)  # (N, S)
        pos = torch.cat(
            [torch.arange(P, device=prompts.device), torch.arange(P, P + La, device=prompts.device).repeat(G)]
        )  # (S,)
        x = self.transformer.drop(self.transformer.wte(tok) + self.transformer.wpe(pos))  # (N, S, C)
        mask = prefix_tree_mask(P, G, La, str(prompts.device))  # (S, S)
        last = len(self.transformer.h) - 1
        for i, block in enumerate(self.transformer.h):
            # the last block only needs the positions that predict answer tokens
            x = block.forward_masked(x, mask, start=P - 1 if i == last else 0)
        x = self.transformer.ln_f(x)  # (N, 1 + G*La, C): position P-1, then the answers
        C = x.size(-1)
        # row i*G+g: the prompt's last position (shared by the group), then answer g's own
        hidden = torch.cat([x[:, :1, None].expand(N, 1, G, C).transpose(1, 2), x[:, 1:].view(N, G, La, C)], dim=2).view(
            B, L, C
        )  # (B, L, C)
        logits = self.lm_head(hidden)  # (B, L, V)
        return (logits, hidden) if return_hidden else logits

    def _check_sampling(self, prompts, n_new, noise, greedy, group_size: int = 1):
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        B, P = prompts.shape
        B = B * group_size
        if P + n_new > self.config.block_size:
            raise ValueError(f"prompt length {P} + n_new {n_new} exceeds block_size {self.config.block_size}")
        if greedy:
            return None
        shape = (B, n_new, self.config.vocab_size)
        if noise is None:
            noise = torch.rand(shape, device=prompts.device)
        elif tuple(noise.shape) != shape:
            raise ValueError(f"noise has shape {tuple(noise.shape)}, expected {shape}")
        return _gumbel(noise)  # (B, n_new, V)

    @staticmethod
    def _pick(logits, g, temperature: float, top_k: int = 0, top_p: float = 1.0):
        """Gumbel-max: argmax(logits / temperature + g) samples softmax(logits / temperature),
        truncated to top_k / top_p when set (truncate_logits); greedy argmax when g is None."""
        if g is None:
            return logits.argmax(dim=-1)  # (B,)
        return (truncate_logits(logits.float() / temperature, top_k, top_p) + g).argmax(dim=-1)  # (B,)

    @torch.no_grad()
    def generate(
        self,
        prompts,
        n_new: int,
        temperature: float = 1.0,
        noise=None,
        greedy: bool = False,
        return_logits: bool = False,
        group_size: int = 1,
        top_k: int = 0,
        top_p: float = 1.0,
    ):
        """Sample n_new tokens after prompts (N, P) with a KV cache; returns (B, n_new) tokens,
        B = N * group_size.

        group_size G: sample G answers of each prompt, rows i*G .. i*G+G-1 for prompt i
        (the same as passing prompts.repeat_interleave(G, 0) with G = 1, but the prompt is
        prefilled once and its keys/values copied to the G rows of the cache).
        noise: uniform u in [0, 1), shape (B, n_new, V); token t is
        argmax(logits_t / temperature + g_t), g = -log(-log(u)), a sample of
        softmax(logits_t / temperature). Drawn with torch.rand when None. greedy=True or
        temperature == 0 takes the argmax. top_k, top_p: truncated sampling (truncate_logits, on
        the tempered logits). return_logits also returns the (untempered, untruncated) logits of
        each step, (B, n_new, V).
        """
        greedy = greedy or temperature == 0
        g = self._check_sampling(prompts, n_new, noise, greedy, group_size)  # (B, n_new, V) or None
        N, P = prompts.shape
        B = N * group_size
        caches = [KVCache(P + n_new) for _ in self.transformer.h]
        out = prompts.new_empty(B, n_new)  # (B, n_new)
        all_logits = None
        x, pos = prompts, 0
        for t in range(n_new):
            hidden = self._trunk(x, caches, pos, last_only=True)  # (N or B, 1, C)
            logits = self.lm_head(hidden[:, -1])  # (N or B, V)
            if t == 0 and group_size > 1:  # the prompts were prefilled once: copy to the groups
                for cache in caches:
                    cache.repeat_rows(group_size, P)
                logits = logits.repeat_interleave(group_size, dim=0)  # (B, V)
            if return_logits:
                if all_logits is None:
                    all_logits = logits.new_empty(B, n_new, logits.size(-1))  # (B, n_new, V)
                all_logits[:, t] = logits
            out[:, t] = self._pick(logits, None if g is None else g[:, t], temperature, top_k, top_p)
            pos += x.size(1)
            x = out[:, t : t + 1]  # (B, 1)
        return (out, all_logits) if return_logits else out

    @torch.no_grad()
    def matches(self, prompts, target, temperature: float = 1.0, noise=None, greedy: bool = False):
        """Whether `generate(prompts, L, temperature, noise, greedy)` would return exactly `target`
        (N, L), as a bool per row (N,), at a fraction of its cost where rows go wrong early.

        The same decoding as `generate` (KV cache, the same prefill and picks), except that a row
        leaves the batch at its first token that differs from its target: nothing after it can make
        the answer right. The rows that remain compute what they would in the full batch (each row
        of a matmul and of attention is its own), so the result is that of comparing `generate`'s
        output with `target`."""
        greedy = greedy or temperature == 0
        N, P = prompts.shape
        L = target.size(1)
        g = self._check_sampling(prompts, L, noise, greedy)  # (N, L, V) or None
        caches = [KVCache(P + L) for _ in self.transformer.h]
        right = torch.zeros(N, dtype=torch.bool, device=prompts.device)  # (N,)
        alive = torch.arange(N, device=prompts.device)  # the rows still matching their target, (n,)
        x, pos = prompts, 0
        for t in range(L):
            hidden = self._trunk(x, caches, pos, last_only=True)  # (n, 1, C)
            pick = self._pick(self.lm_head(hidden[:, -1]), None if g is None else g[alive, t], temperature)  # (n,)
            same = pick == target[alive, t]  # (n,)
            if t == L - 1:
                right[alive[same]] = True
                break
            if not bool(same.all()):
                keep = same.nonzero().squeeze(1)  # (n',)
                if len(keep) == 0:
                    break
                alive = alive[keep]
                for cache in caches:
                    cache.keep_rows(keep)
            pos += x.size(1)
            x = target[alive, t : t + 1]  # (n', 1): the token each remaining row picked
        return right

    @torch.no_grad()
    def generate_naive(
        self,
        prompts,
        n_new: int,
        temperature: float = 1.0,
        noise=None,
        greedy: bool = False,
        return_logits: bool = False,
        group_size: int = 1,
        top_k: int = 0,
        top_p: float = 1.0,
    ):
        """The sampling of `generate`, recomputing the full sequence at each token (no cache,
        no prefix sharing). A test oracle and a speed reference."""
        greedy = greedy or temperature == 0
        g = self._check_sampling(prompts, n_new, noise, greedy, group_size)  # (B, n_new, V) or None
        prompts = prompts.repeat_interleave(group_size, dim=0)  # (B, P)
        idx = prompts
        all_logits = []
        for t in range(n_new):
            logits = self(idx)[:, -1]  # (B, V)
            all_logits.append(logits)
            nxt = self._pick(logits, None if g is None else g[:, t], temperature, top_k, top_p)  # (B,)
            idx = torch.cat([idx, nxt[:, None]], dim=1)  # (B, P+t+1)
        out = idx[:, prompts.size(1) :]  # (B, n_new)
        return (out, torch.stack(all_logits, dim=1)) if return_logits else out


class ValueHead(nn.Module):
    """PPO critic: a linear read-out of the policy's final hidden state.

    The critic shares the policy trunk: the value head reads the hidden state that
    `GPT.forward(idx, return_hidden=True)` returns, so one forward gives both logits and
    values (cheaper than a second network), and value-loss gradients flow into the shared
    trunk, weighted by value_coef. The head is zero-initialised, so values start at 0 and
    the first updates do not push arbitrary value errors into the trunk.
    """

    def __init__(self, n_embd: int):
        super().__init__()
        self.v = nn.Linear(n_embd, 1)
        nn.init.zeros_(self.v.weight)
        nn.init.zeros_(self.v.bias)

    def forward(self, hidden):
        """Values (B, T) from hidden states (B, T, C)."""
        return self.v(hidden).squeeze(-1)  # (B, T)
