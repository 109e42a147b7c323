import pytest

from mathrl.engine import algorithms, losses, policy_losses, token_selection
from mathrl.pipeline.registry import Registry


def test_lookup_names_the_setting_and_the_allowed_names():
    reg = Registry("train.widget", "widget")
    reg.register("a")(len)
    reg.add("b", max)
    assert reg.lookup("a") is len and list(reg) == ["a", "b"]
    with pytest.raises(ValueError, match=r"train.widget: 'c' is not allowed; allowed: a, b"):
        reg.lookup("c")


def test_a_name_registered_twice_is_refused():
    reg = Registry("train.widget", "widget")
    reg.add("a", len)
    with pytest.raises(ValueError, match="widget 'a' is registered twice"):
        reg.add("a", max)
    assert reg["a"] is len


@pytest.mark.parametrize(
    "registry, setting",
    [
        (algorithms.ESTIMATORS, "algorithm"),
        (policy_losses.POLICY_LOSSES, "policy_loss"),
        (token_selection.TOKEN_SELECTIONS, "token_selection"),
        (losses.KL_ESTIMATORS, "kl_estimator"),
    ],
)
def test_each_registry_errs_with_its_own_setting(registry, setting):
    assert isinstance(registry, Registry) and registry.setting == setting and len(registry) >= 3
    with pytest.raises(ValueError, match=f"^{setting}: 'nope' is not allowed"):
        registry.lookup("nope")
