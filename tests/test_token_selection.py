"""The token selection by entropy (mathrl.engine.token_selection): the masks, the weight, the carries; and in the
trainer."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from mathrl.engine import token_selection as T
from mathrl.engine.losses import aggregate
from mathrl.pipeline.config import load_schema


def test_top_entropy_keeps_the_highest_and_breaks_ties_by_position():
    entropy = torch.tensor([[0.5, 0.9, 0.1, 7.0], [0.9, 0.2, 0.9, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])  # 7 answer tokens; 7.0 is no answer token
    # round(0.4 x 7) = 3 of them: the three 0.9s, first (0, 1), then (1, 0), then (1, 2)
    top = T.top_entropy(entropy, mask, 0.4)
    assert top.tolist() == [[False, True, False, False], [True, False, True, False]]
    # round(0.3 x 7) = round(2.1) = 2: the tie at 0.9 goes to the two earliest in row-major order
    assert T.top_entropy(entropy, mask, 0.3).tolist() == [[False, True, False, False], [True, False, False, False]]
    bottom = T.bottom_entropy(entropy, mask, 0.4)
    assert bottom.tolist() == [[True, False, True, False], [False, True, False, True]]
    assert not (top & bottom).any() and ((top | bottom) == (mask > 0)).all()


def test_round_half_up_and_an_empty_batch():
    mask = torch.ones(1, 5)
    assert int(T.top_entropy(torch.arange(5.0).view(1, 5), mask, 0.5).sum()) == 3  # 2.5 rounds up
    assert T.top_entropy(torch.arange(5.0).view(1, 5), mask, 0.5).tolist() == [[False, False, True, True, True]]
    assert not T.top_entropy(torch.zeros(2, 3), torch.zeros(2, 3), 0.2).any()


def test_all_selects_nothing_and_the_registry_names_its_key():
    assert T.get_token_selection("all")(torch.rand(2, 3), torch.ones(2, 3), 0.2) is None
    with pytest.raises(
        ValueError, match=r"token_selection: 'top' is not allowed; allowed: all, top_entropy, bottom_entropy"
    ):
        T.get_token_selection("top")
    with pytest.raises(ValueError, match="token_fraction: 1.0 is not allowed"):
        T.top_entropy(torch.rand(2, 3), torch.ones(2, 3), 1.0)
    with pytest.raises(ValueError, match="registered twice"):
        T.token_selection("all")(T.all_tokens)


def test_only_all_spares_the_sampler_its_entropy():
    assert [name for name, rule in T.TOKEN_SELECTIONS.items() if not T.reads_entropy(rule)] == ["all"]


def test_the_schema_names_exactly_the_registered_selections():
    train = load_schema()["definitions"]["train"]["properties"]
    assert train["token_selection"]["enum"] == list(T.TOKEN_SELECTIONS) and train["token_selection"]["default"] == "all"
    assert train["token_fraction"]["default"] == 0.2


def test_the_weighted_token_loss_is_the_mean_over_the_selected_tokens():
    pg = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # 5 answer tokens
    selected = torch.tensor([[False, True, False], [True, False, True]])  # (1, 2) is no answer token
    w = T.selection_weight(selected, mask, n_selected=2.0, n_answer=5.0)
    num, den = aggregate(pg * w, mask, "token")
    assert float(num) / den == pytest.approx((2.0 + 4.0) / 2)
    every = mask > 0  # every answer token selected: the weight is exactly 1, the loss exactly the unweighted one
    w1 = T.selection_weight(every, mask, n_selected=5.0, n_answer=5.0)
    assert torch.equal(pg * w1 * mask, pg * mask) and torch.equal(aggregate(pg * w1, mask, "token")[0],
                                                                  aggregate(pg, mask, "token")[0])  # fmt: skip


def test_carry_in_by_hand():
    # 3-digit addition, answers of 4 digits then the end token, least significant digit first
    a, b = torch.tensor([7, 123, 999, 50, 0]), torch.tensor([5, 456, 1, 50, 0])
    carry = T.carry_in(a, b, 4).tolist()
    assert carry[0] == [False, True, False, False, False]  # 7 + 5 = 12: into the tens
    assert carry[1] == [False, False, False, False, False]  # 123 + 456 = 579: none
    assert carry[2] == [False, True, True, True, False]  # 999 + 1 = 1000: into every digit above the units
    assert carry[3] == [False, False, True, False, False]  # 50 + 50 = 100: into the hundreds
    assert carry[4] == [False] * 5


def test_the_new_keys_at_their_defaults_leave_a_runs_hash_as_it_was():
    from mathrl.pipeline.config import NEUTRAL_DEFAULTS, config_hash, run_hash

    train = load_schema()["definitions"]["train"]["properties"]
    assert all(train[k]["default"] == v for k, v in NEUTRAL_DEFAULTS.items())
    before = {"lr": 3e-4, "steps": 10}
    assert run_hash({**before, **NEUTRAL_DEFAULTS}) == config_hash(before)
    assert run_hash({**before, "token_selection": "top_entropy", "token_fraction": 0.2}) != config_hash(before)
    assert run_hash({**before, "token_selection": "all", "token_fraction": 0.3}) != config_hash(before)


# ------------------------------------------------------------------ in the trainer


def _train(env, run_id, *settings):
    from mathrl.pipeline.cli import main

    assert main(["train", "--config", str(env["config"]), "--run-id", run_id, "steps=2", *settings]) == 0
    return pd.read_csv(env["results"] / "runs" / run_id / "metrics.csv")


def test_all_leaves_the_run_exactly_as_without_the_setting(run_env):
    volatile = ["seconds", "sample_seconds", "update_seconds", "eval_seconds"]
    plain = _train(run_env, "plain")
    # the same run with the new keys written out at their defaults, and one with a fraction it does not use
    written = _train(run_env, "written", "token_selection=all", "token_fraction=0.2")
    other = _train(run_env, "other_fraction", "token_selection=all", "token_fraction=0.5")
    for df in (written, other):
        pd.testing.assert_frame_equal(plain.drop(columns=volatile), df.drop(columns=volatile))
    assert plain["token_selected_frac"].isna().all()


@pytest.mark.parametrize("name,share", [("top_entropy", 0.2), ("bottom_entropy", 0.8)])
def test_a_selection_trains_on_its_share_and_logs_it(run_env, name, share):
    df = _train(run_env, name, f"token_selection={name}", "token_fraction=0.2")
    assert df["token_selected_frac"].tolist() == pytest.approx([share, share], abs=0.05)
    above = df["entropy_selected"] > df["entropy_unselected"]
    assert above.all() if name == "top_entropy" else (~above).all()
    assert df["grad_norm"].notna().all() and not math.isnan(df["policy_loss"].iloc[0])
