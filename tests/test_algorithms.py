"""The algorithm registry (mathrl.engine.algorithms): each estimator on a small case by hand, and
the registry and the schema naming the same algorithms."""

from __future__ import annotations

import pytest
import torch

from mathrl.engine import algorithms as A
from mathrl.pipeline.config import load_schema


def close(a, b, tol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol, rtol=0
    )


MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])  # 4 rollouts, 2 answer tokens; row 1 ended early


def inputs(rewards, **kw) -> A.AdvantageInputs:
    return A.AdvantageInputs(torch.tensor(rewards), MASK, group_size=2, **kw)


def test_the_config_refuses_group_size_1_for_exactly_the_grouped_estimators():
    from mathrl.pipeline.config import GROUP_ALGORITHMS

    assert sorted(GROUP_ALGORITHMS) == sorted(name for name, e in A.ESTIMATORS.items() if e.grouped)


def test_the_schema_names_exactly_the_registered_algorithms():
    schema = load_schema()
    assert sorted(schema["definitions"]["train"]["properties"]["algorithm"]["enum"]) == sorted(A.ESTIMATORS)
    assert sorted(schema["properties"]["algorithms"]["propertyNames"]["enum"]) == sorted(A.ESTIMATORS)


def test_flags_say_what_an_estimator_needs():
    assert [n for n, e in A.ESTIMATORS.items() if e.critic] == ["ppo"]
    assert [n for n, e in A.ESTIMATORS.items() if e.baseline] == ["reinforce"]
    with pytest.raises(ValueError, match="allowed: reinforce"):
        A.get_estimator("a2c")
    with pytest.raises(ValueError, match="registered twice"):
        A.estimator("grpo")(lambda x: x)


def test_reinforce_subtracts_the_baseline_on_every_answer_token():
    adv, returns = A.reinforce(inputs([1.0, 0.0, 0.5, 0.25], baseline=0.25))
    close(adv, [[0.75, 0.75], [-0.25, 0.0], [0.25, 0.25], [0.0, 0.0]])
    assert returns is None


def test_reinforce_without_a_baseline_pushes_by_the_raw_reward():
    adv, returns = A.reinforce_no_baseline(inputs([1.0, -1.0, -1.0, 1.0], baseline=0.25))  # the baseline is ignored
    close(adv, [[1.0, 1.0], [-1.0, 0.0], [-1.0, -1.0], [1.0, 1.0]])
    assert returns is None


def test_grpo_and_dapo_normalise_within_groups():
    # groups [1, 0] and [3, 3]: mean 0.5, population std 0.5 -> +-1 (eps 1e-6); a flat group gets 0
    for name in ("grpo", "dapo"):
        adv, returns = A.get_estimator(name).fn(inputs([1.0, 0.0, 3.0, 3.0]))
        close(adv, [[1.0, 1.0], [-1.0, 0.0], [0.0, 0.0], [0.0, 0.0]], tol=1e-5)
        assert returns is None


def test_dr_grpo_centres_without_dividing_by_the_std():
    # groups [1, 0] and [3, 3]: mean 0.5 -> +-0.5 (GRPO: +-1); a flat group gets 0
    adv, returns = A.dr_grpo(inputs([1.0, 0.0, 3.0, 3.0]))
    close(adv, [[0.5, 0.5], [-0.5, 0.0], [0.0, 0.0], [0.0, 0.0]])
    assert returns is None
    # one right of four: 1 - 0.25 = 0.75 and -0.25 each (GRPO would divide by std sqrt(3)/4)
    adv, _ = A.dr_grpo(A.AdvantageInputs(torch.tensor([1.0, 0.0, 0.0, 0.0]), MASK, group_size=4))
    close(adv, [[0.75, 0.75], [-0.25, 0.0], [-0.25, -0.25], [-0.25, -0.25]])


def test_rloo_leaves_one_out():
    # group [1, 0]: 1 - 0 = 1 and 0 - 1 = -1; group [2, 4]: -2 and 2
    adv, _ = A.rloo(inputs([1.0, 0.0, 2.0, 4.0]))
    close(adv, [[1.0, 1.0], [-1.0, 0.0], [-2.0, -2.0], [2.0, 2.0]])


def test_ppo_is_gae_from_the_critic_values():
    values = torch.tensor([[0.5, 0.25], [0.5, 9.0], [0.0, 0.0], [1.0, 1.0]])
    adv, returns = A.ppo(inputs([1.0, 0.0, 1.0, 0.0], values=values))
    # gamma = lam = 1: A_t = R - V_t on real tokens; row 1 has one real token (its value 9 is past the end)
    close(adv, [[0.5, 0.75], [-0.5, 0.0], [1.0, 1.0], [-1.0, -1.0]])
    close(returns, [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="critic"):
        A.ppo(inputs([1.0, 0.0, 1.0, 0.0]))


def test_ppo_takes_per_token_rewards_where_given():
    values = torch.tensor([[0.5, 0.25], [0.5, 9.0], [0.0, 0.0], [1.0, 1.0]])
    dense = torch.tensor([[0.5, 0.5], [0.5, 3.0], [0.0, 0.5], [0.5, 0.0]])  # row 1's 3.0 is past its end
    adv, returns = A.ppo(inputs([1.0, 0.0, 1.0, 0.0], values=values, token_rewards=dense))
    # the sequence rewards are ignored; R_t = rewards from t on: [1, 0.5], [0.5], [0.5, 0.5], [0.5, 0]
    close(returns, [[1.0, 0.5], [0.5, 0.0], [0.5, 0.5], [0.5, 0.0]])
    close(adv, [[0.5, 0.25], [0.0, 0.0], [0.5, 0.5], [-0.5, -1.0]])
