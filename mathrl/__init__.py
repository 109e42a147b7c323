"""mathrl: a reproducibility pipeline for RL training-stability research.

Tiny GPTs learn arithmetic with a supervised warm-up and then RL; grids of runs reproduce
entropy collapse, vanishing gradients, reward hacking and the batch-size and
hyperparameter trade-offs, measured rather than described.
"""

__version__ = "0.1.0"
