"""The engine: what computes a result, on torch.

The tasks and their problem sets, the GPT and its sampler, the supervised warm-ups, the RL
trainer with its advantage estimators, policy losses, token selections, rewards, schedules and
stability monitor, the mismatch and gradient probes, the carry probe a run writes, the bandit
of lab 04, snapshots and the distributed set-up. A module here may import the pipeline's
infrastructure (layout, config, settings, errors, atomic writes) and the analysis's pure maths;
the analysis imports from here only the torch-free helpers its import test names.
"""
