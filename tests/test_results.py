from mathrl.analysis.results import settings_drift


def test_settings_drift_names_each_changed_key_and_ignores_unrecorded_ones():
    expected = {"lr": 2.5e-4, "steps": 24, "grad_clip": None, "token_selection": "all", "pair": (1, 2)}
    recorded = {"lr": 1e-4, "steps": 24, "grad_clip": 1.0, "pair": [1, 2], "old_key": 3}
    assert settings_drift(expected, recorded) == ["lr 0.0001 -> 0.00025", "grad_clip 1.0 -> None"]
    assert settings_drift(expected, {**expected, "pair": [1, 2]}) == []  # a tuple recorded as a JSON list is the same
