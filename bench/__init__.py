"""mathrl benchmark suite (`make bench` = `python -m bench`).

Measures, on this machine, the wall-clock cost of one RL step (sampling + update) and of one
supervised warm-up step per model preset, the peak resident memory of a fresh training
process per configuration, and the speed-up of our KV-cache sampling over a naive
full-recomputation sampler, measured in the same run. Every figure is a median over repeated
steps; each configuration runs in its own subprocess (`python -m bench.rl_step ...`,
`python -m bench.sft_step ...`) that prints one JSON line, so ru_maxrss is that
configuration's own peak. Results go to bench/results/*.json (git-ignored).

Speed does not depend on the weights, so the benchmark builds a throwaway results tree
(problem files and a randomly initialised "warm-up" checkpoint per preset) in a temp dir.
"""
