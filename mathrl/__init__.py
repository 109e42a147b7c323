"""mathrl: a reproducibility pipeline for RL training-stability research.

Tiny GPTs learn arithmetic with a supervised warm-up and then RL; grids of runs reproduce
entropy collapse, vanishing gradients, reward hacking and the batch-size and
hyperparameter trade-offs, measured rather than described.
"""

__version__ = "0.1.0"


def versions() -> dict:
    """The versions a result was computed with (recorded in every summary.json)."""
    import platform

    import numpy
    import torch

    return {"mathrl": __version__, "python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__}
