"""The measures of math-rl-training-system.md's runs on a hand-made run."""

import pandas as pd
import pytest

from mathrl.analysis.measures import MEASURES
from mathrl.analysis.results import Run
from mathrl.pipeline.config import RunSpec


def test_steps_and_throughput():
    m = pd.DataFrame({"step": [1, 2, 3, 4], "samples": [128, 256, 384, 512], "seconds": [1.0, 2.0, 0.5, 0.5]})
    spec = RunSpec("system__add__s0", "system", "add", {}, 0, {"task": "add"})
    run = Run(spec, "complete", {"initial": {"eval_accuracy": 0.3}, "config": {}}, m)
    assert MEASURES["steps_done"][1](run) == 4.0
    assert MEASURES["seq_per_s"][1](run) == pytest.approx(512 / 4.0)  # sequences over the steps' 4 seconds
