"""CPU-seconds of training runs by part, for two versions of mathrl on the same runs:
`python -m bench.runcost --old DIR --new DIR [--config FILE] [--runs RUN ...] [--rounds N]`.

CPU-seconds survive a machine shared with other work, where wall seconds do not. Each version
(a checkout, e.g. `git archive 99337df | tar -x -C /tmp/old`) runs in its own interpreter
that imports what the pipeline's fork server imports (torch, the trainer) and then forks one
child per run, as the fork server does; the child runs `mathrl train --run RUN` into a
throwaway results tree and its CPU time is split by wrapping the trainer's methods:
- RL steps: `Trainer.step` less the evaluations inside it;
- evaluation: `Trainer.evaluate`, `Trainer.evaluate_start` (where it exists) and pass@k;
- run setup: the rest of the child (configuration, problems, checkpoint, writing).
The versions alternate run by run (old, new, old, new, ...), each on a results tree of its own
that starts with the same problem files and warm-up checkpoints (copied from --warm), so the
first run from a warm-up pays for what a version computes once per warm-up.
`--config` is the configuration both read (default: this checkout's config/config.yaml),
marked standalone so that neither layers its own default under it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRELOAD = ("torch", "torch._dynamo", "mathrl.pipeline.cli", "mathrl.engine.trainer", "mathrl.engine.sft")


# ---------------------------------------------------------------------- in the version's interpreter
def _child(config: str, run: str, out: str, report: str) -> None:
    """In a forked child: train one run with the trainer's methods timed; write the parts."""
    import time

    import mathrl.engine.trainer as trainer
    from mathrl.pipeline.cli import main

    cpu = {"eval": 0.0, "step": 0.0}
    depth = {"eval": 0}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            if name == "eval":
                depth["eval"] += 1
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                if name == "eval":
                    depth["eval"] -= 1
                if name != "eval" or depth["eval"] == 0:
                    cpu[name] += time.process_time() - t

        return wrapper

    T = trainer.Trainer
    for method in ("evaluate", "evaluate_start", "pass_at_k_counts"):
        if hasattr(T, method):
            setattr(T, method, timed("eval", getattr(T, method)))
    eval_in_steps = {"cpu": 0.0}
    original_step = T.step

    def step(self):
        before = cpu["eval"]
        t = time.process_time()
        row = original_step(self)
        eval_in_steps["cpu"] += cpu["eval"] - before
        cpu["step"] += time.process_time() - t
        return row

    T.step = step
    status = main(["train", "--config", config, "--run", run, "--out", out])
    total = time.process_time()
    Path(report).write_text(json.dumps({"status": status, "total": total,
                                        "rl_steps": cpu["step"] - eval_in_steps["cpu"],
                                        "evaluation": cpu["eval"]}))  # fmt: skip


def serve(config: str, jobs: str) -> None:
    """Import the preload, then for each line of `jobs` on stdin (`run out report`), fork a child."""
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    import torch

    torch.set_num_threads(1)
    for line in sys.stdin:
        run, out, report = line.split()
        pid = os.fork()
        if pid == 0:
            try:
                with open(os.devnull, "w") as null:
                    os.dup2(null.fileno(), 1)
                _child(config, run, out, report)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        print("done", flush=True)


# ---------------------------------------------------------------------- the driver
def standalone_config(source: Path, results: Path, dest: Path) -> Path:
    import yaml

    cfg = yaml.safe_load(source.read_text())
    cfg.update(standalone=True, results=str(results))
    dest.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.runcost", description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, required=True, help="checkout of the old version")
    p.add_argument("--new", type=Path, default=ROOT, help="checkout of the new version (default: this one)")
    p.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    p.add_argument(
        "--warm", type=Path, default=ROOT / "results", help="results tree whose problems/ and sft/ both start from"
    )
    p.add_argument("--runs", nargs="+", required=True)
    p.add_argument("--rounds", type=int, default=1, help="times each run is trained by each version")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mathrl-runcost-") as tmp:
        servers, configs = {}, {}
        for name, checkout in (("old", args.old), ("new", args.new)):
            results = Path(tmp) / name / "results"
            for part in ("problems", "sft"):
                shutil.copytree(args.warm / part, results / part, ignore=shutil.ignore_patterns("evaluations"))
            configs[name] = standalone_config(args.config, results, Path(tmp) / name / "config.yaml")
            env = {
                **os.environ,
                "PYTHONPATH": str(Path(checkout).resolve()),
                "MATHRL_CACHE_DIR": str(Path(tmp) / name / "cache"),
            }
            servers[name] = subprocess.Popen([sys.executable, __file__, "--serve", str(configs[name])], env=env,
                                             cwd=checkout,
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        records = []
        for rnd in range(args.rounds):
            for run in args.runs:
                for name in ("old", "new"):
                    out = Path(tmp) / name / f"run-{rnd}-{run}"
                    report = Path(tmp) / name / f"report-{rnd}-{run}.json"
                    servers[name].stdin.write(f"{run} {out} {report}\n")
                    servers[name].stdin.flush()
                    servers[name].stdout.readline()
                    rec = json.loads(report.read_text())
                    rec.update(
                        version=name, run=run, round=rnd, run_setup=rec["total"] - rec["rl_steps"] - rec["evaluation"]
                    )
                    records.append(rec)
                    print(json.dumps(rec), file=sys.stderr, flush=True)
        for server in servers.values():
            server.stdin.close()
            server.wait()
    summary = {}
    for name in ("old", "new"):
        recs = [r for r in records if r["version"] == name]
        summary[name] = {
            part: statistics.mean(r[part] for r in recs) for part in ("total", "rl_steps", "evaluation", "run_setup")
        }
        summary[name]["n"] = len(recs)
    summary["saved_per_run"] = summary["old"]["total"] - summary["new"]["total"]
    print(json.dumps({"summary": summary, "runs": records}, indent=1))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], "")
    else:
        sys.exit(main())
