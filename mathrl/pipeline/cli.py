"""`mathrl <subcommand>`: every pipeline step, runnable by hand.

Each subcommand reads the same config files as the pipeline (`--config`, repeatable, merged
in order; `--set a.b=value` for any key) and validates them with the same schema. Bad
input exits with status 2 and one message naming the key, the value and what is allowed,
before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mathrl.pipeline import layout, rundir

# mathrl.pipeline.config (jsonschema, yaml: about 0.08 s of CPU) is imported where a command needs it:
# `mathrl launch`, run by every training job of the pipeline, needs none of it.
from mathrl.pipeline.errors import ConfigError, DamagedFileError, ProblemFileError, RunDirError, SnapshotError

if TYPE_CHECKING:
    from mathrl.pipeline.settings import RunSettings

# mathrl.pipeline.config.DEFAULT_CONFIG, named here without importing that module (tests/test_cli.py checks they agree)
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "config.yaml"

USAGE_ERROR = 2


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        action="append",
        metavar="FILE",
        help=(
            "config file layered over "
            f"{DEFAULT_CONFIG.relative_to(Path.cwd()) if DEFAULT_CONFIG.is_relative_to(Path.cwd()) else DEFAULT_CONFIG}"
            ", repeatable, later files win"
        ),
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key, e.g. --set sft.add.max_steps=200",
    )


def _load(args) -> dict:
    """The command's configuration, validated (each of its runs too) once per configuration and code: the pipeline's
    commands all read one config file, so only the first of them pays for the checks (`completed`'s cache)."""
    from mathrl.pipeline.config import layered, load_config_and_runs

    return load_config_and_runs(layered(args.config), args.set)[0]


def cmd_problems(args) -> int:
    from mathrl.engine.tasks import write_problem_splits
    from mathrl.pipeline.layout import PROBLEM_SPLITS

    cfg = _load(args)
    names = [args.task] if args.task else list(cfg["tasks"])
    _check_task(cfg, names)
    for name in names:
        try:
            out, splits = write_problem_splits(cfg, name)
        except ValueError as exc:
            raise ConfigError(f"tasks.{name}: {exc}") from None
        sizes = ", ".join(f"{len(splits[split])} {split}" for split in PROBLEM_SPLITS)
        print(f"problems {name}: {sizes} problems in {out}")
    return 0


def cmd_sft(args) -> int:
    """The warm-ups of a task (or those named, `--warmup K`) on the pipeline's thread count (`torch_threads`), so that
    by hand they end on the pipeline's checkpoints; each resumes from its snapshot. `--parallel K` deals them out to K
    processes at once (`sft_shares`), each on that thread count: the same checkpoints, sooner."""
    cfg = _load(args)
    _check_task(cfg, [args.task])
    count = layout.warmups(cfg, args.task)
    for k in args.warmup or ():
        if not 0 <= k < count:
            raise ConfigError(f"--warmup {k}: sft.{args.task}.warmups is {count}; allowed: 0..{count - 1}")
    chosen = list(dict.fromkeys(args.warmup)) if args.warmup else list(range(count))
    if args.out and len(chosen) > 1:
        raise ConfigError(f"--out names one warm-up's directory: give one --warmup K (task {args.task} has {count})")
    _check_problems(cfg, args.task)  # before a warm-up's directory is taken (its lock is the first thing written)
    if args.starts and not cfg["sft"][args.task]["starts"] and not cfg["sft"][args.task]["control_seeds"]:
        raise ConfigError(f"sft.{args.task}: no starts and no control_seeds configured for --starts")
    shares = sft_shares(args, cfg, chosen)
    if len(shares) > 1:
        from mathrl.pipeline.launch import run_all

        return run_all(shares)
    from mathrl.engine.sft import run_sft, run_starts

    with torch_threads(args.threads, cfg, "threads_sft"):
        for k in chosen:
            if args.starts:
                out = Path(args.out) if args.out else layout.at(cfg, layout.SFT_STARTS, task=args.task, warmup=k).parent
                with rundir.hold(out):  # one writer, as a run's directory has
                    run_starts(cfg, args.task, out, k)
                continue
            out = Path(args.out) if args.out else layout.at(cfg, layout.SFT_DIR, task=args.task, warmup=k)
            with rundir.hold(out):
                args.snapshot_path = out / layout.SNAPSHOT_FILE  # where Ctrl-C says the same command resumes
                run_sft(cfg, args.task, out, k)
    return 0


def sft_shares(args, cfg: dict, chosen: list[int]) -> list[list[str]]:
    """`mathrl sft` commands that train the `chosen` warm-ups between `--parallel` processes at once, dealt out in
    turn, each process on the threads one would have (so the same float sums); none for one process."""
    from mathrl.pipeline.launch import parallel_count

    if args.parallel == "1" or len(chosen) < 2:
        return []
    threads = pipeline_threads(args.threads, cfg, "threads_sft") or int(os.environ["OMP_NUM_THREADS"])
    setting = cfg.get("pipeline", {}).get("gpus_sft", "auto")  # auto: one where a GPU is visible
    gpus = None if setting == "auto" else int(setting)
    try:
        k = min(parallel_count(args.parallel, threads, gpus), len(chosen))
    except ValueError as exc:  # --parallel neither a whole number nor auto
        raise ConfigError(str(exc)) from None
    if k < 2:
        return []
    head = [sys.executable, "-m", "mathrl", "sft", *(f"--config={path}" for path in args.config or ())]
    head += [f"--set={item}" for item in args.set or ()] + ["--task", args.task, "--threads", str(args.threads)]
    head += ["--starts"] if args.starts else []
    return [head + [f"--warmup={w}" for w in chosen[i::k]] for i in range(k)]


def _check_problems(cfg: dict, task: str) -> None:
    """The task's problem files read whole (ProblemFileError names a missing file or a bad line)."""
    from mathrl.engine.tasks import read_problems, task_of

    for split in layout.PROBLEM_SPLITS:
        if split != "val" or cfg["tasks"][task]["n_val"]:
            read_problems(layout.problems_file(cfg, task, split), task_of(cfg, task))


def pipeline_threads(requested: int, cfg: dict, key: str) -> int | None:
    """The torch threads of a command: `--threads` when given; else none to set where OMP_NUM_THREADS is (the
    launcher's share of a job, which torch reads itself); else the pipeline's (pipeline.KEY). The thread count changes
    float sums, so a run or warm-up by hand on all cores would not reproduce the pipeline's of the same settings."""
    if requested:
        return requested
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return None
    return int(cfg.get("pipeline", {}).get(key, 1))


@contextlib.contextmanager
def torch_threads(requested: int, cfg: dict, key: str):
    """torch on `pipeline_threads` inside the block; the caller's count back after it (the tests call in-process)."""
    import torch

    before, threads = torch.get_num_threads(), pipeline_threads(requested, cfg, key)
    if threads:
        check_threads(threads, "--threads" if requested else f"pipeline.{key}")
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def check_threads(threads: int, source: str) -> None:
    """A warning where the threads of this process (times its ranks on this machine) are more than the CPUs it may
    use: they take turns, slower, though with the float sums of that many threads (which is why it is allowed: a
    run by hand reproduces a pipeline's of more threads that way)."""
    from mathrl.pipeline.limits import usable_cpus

    cpus, what = usable_cpus()
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if threads * ranks > cpus and int(os.environ.get("RANK", "0")) == 0:
        each = f" in each of {ranks} processes" if ranks > 1 else ""
        why = f"the threads take turns and run slower (with the float sums of {threads} threads all the same)"
        print(
            f"mathrl: warning: {source} {threads}{each}: this process may use {cpus} CPUs ({what}), so {why}",
            file=sys.stderr,
        )


def resolve_run(
    cfg: dict, run: str | None, run_id: str | None, overrides: list[str], runs: dict | None = None
) -> tuple[str, str | None, RunSettings]:
    """(run id, experiment, settings) for `--run` (an experiment's run, its settings changed by the overrides with
    `config.overridden`) or an ad hoc run (the config's train block and the overrides, resolved once);
    `runs` is `expand_runs(cfg)` where the caller has it."""
    from mathrl.pipeline.config import check_changes, expand_runs, overridden, parse_overrides, run_settings
    from mathrl.pipeline.settings import RunSettings

    pairs = parse_overrides(overrides)
    if any(len(path) != 1 for path, _ in pairs):
        raise ConfigError("train overrides are run settings (lr=1e-3); use --set for other config keys")
    explicit = {path[0]: value for path, value in pairs}
    if run:
        runs = expand_runs(cfg) if runs is None else runs
        if run not in runs:
            import difflib

            close = difflib.get_close_matches(run, list(runs), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else "; `mathrl runs` lists them"
            experiment = run.split("__")[0]
            if not close and experiment not in cfg["experiments"]:
                hint += (
                    f"; no experiment {experiment!r} in the config files read: is the --config FILE that "
                    f"defines it missing?"
                )
            raise ConfigError(f"--run: {run!r} is not a run of any experiment{hint}")
        spec = runs[run]
        if spec.same_as:  # trained once, under the first run with these settings
            print(f"{run} has the settings of {spec.same_as}: training that run", file=sys.stderr)
            run, spec = spec.same_as, runs[spec.same_as]
        settings = overridden(cfg, spec, explicit)
        if run_id is not None:  # a variant of the experiment's run, under a name of its own
            if run_id in runs:
                raise ConfigError(
                    f"--run-id: {run_id!r} is a run of experiment {runs[run_id].experiment}; "
                    f"name the variant of {run} otherwise"
                )
            return _checked_run_id(run_id), None, settings
        from mathrl.engine.schedules import OUTSIDE_THE_STEP

        changed = sorted(
            k for k in explicit if k not in OUTSIDE_THE_STEP and getattr(settings, k) != getattr(spec.settings, k)
        )
        if changed:  # results/runs/RUN would hold another run under the experiment's name
            raise ConfigError(
                f"--run {run}: its settings come from experiment {spec.experiment}; "
                f"{', '.join(f'{k}={explicit[k]!r}' for k in changed)} would make another run under its name "
                f"(the pipeline and the report would take it for {run}); use --run-id NAME for a variant"
            )
        return run, spec.experiment, settings
    check_changes(explicit)  # an unknown key named before the settings are typed
    settings = RunSettings.from_dict(run_settings(cfg, explicit))
    return _checked_run_id(run_id) if run_id is not None else "adhoc", None, settings


def _checked_run_id(run_id: str) -> str:
    """The run id names a directory under results/runs and reaches shell commands and the report."""
    from mathrl.pipeline.config import RUN_ID_CHARS

    if not run_id or not set(run_id) <= RUN_ID_CHARS or run_id.startswith("."):
        raise ConfigError(f"--run-id: {run_id!r} is not allowed; use letters, digits and _ . - (not starting with .)")
    return run_id


def cmd_train(args) -> int:
    import time

    started = time.perf_counter()
    from mathrl.pipeline.config import layered, load_config_and_runs

    cfg, runs = load_config_and_runs(layered(args.config), args.set)  # validated and expanded once per configuration
    names = args.run or [None]
    if args.run_logs and not args.run:
        raise ConfigError("--run-logs: the logs are named by the runs; give each run with --run")
    if len(names) == 1 and not args.run_logs:
        return train_one(cfg, runs, names[0], args, started)
    given = [
        flag
        for flag, value in (
            ("--run-id", args.run_id),
            ("--out", args.out),
            ("--dry-run", args.dry_run),
            ("KEY=VALUE", args.overrides),
        )
        if value
    ]
    if given:
        how = f"--run given {len(names)} times" if len(names) > 1 else "--run-logs"
        raise ConfigError(
            f"{how}: {', '.join(given)} name one run's own output; give one --run, without --run-logs, with them"
        )
    main_rank = int(os.environ.get("RANK", "0")) == 0
    with contextlib.ExitStack() as held:  # every run's directory is this job's before the first run trains
        for name in names if main_rank else ():
            if name in runs:  # (a name that is no run is refused by train_one, with the runs it could mean)
                held.enter_context(rundir.hold(layout.at(cfg, layout.RUN_DIR, run_id=runs[name].trained_as)))
        for name in names:  # each run's console lines in its own log (rank 0's), as if it had been a job of its own
            log = layout.at(cfg, layout.STAGES["train"].log, run_id=name)
            log.parent.mkdir(parents=True, exist_ok=True)
            with (
                open(log if main_rank else os.devnull, "w") as fh,
                contextlib.redirect_stdout(fh),
                contextlib.redirect_stderr(fh),
            ):
                train_one(cfg, runs, name, args, started)
            if main_rank:
                print(f"run {name}: trained (log {log})", flush=True)
            started = time.perf_counter()
    return 0


def train_one(cfg: dict, runs: dict, name: str | None, args, started: float) -> int:
    """One run of `mathrl train` (an experiment's run `name`, or an ad hoc run where it is None)."""
    from mathrl.engine import distributed
    from mathrl.engine.trainer import Trainer
    from mathrl.pipeline.config import check_train

    run_id, experiment, settings = resolve_run(cfg, name, args.run_id, args.overrides, runs)  # typed and frozen
    world = int(os.environ.get("WORLD_SIZE", "1"))
    check_train(cfg, settings.as_dict(), "run", world_size=world)
    memory = _check_memory(cfg, settings, world)
    if args.dry_run:
        out = Path(args.out) if args.out else layout.at(cfg, layout.RUN_DIR, run_id=run_id)
        print(f"run {run_id}" + (f" of experiment {experiment}" if experiment else "") + f", in {out}; {memory}")
        width = max(map(len, settings.as_dict()))
        for key, value in settings.as_dict().items():
            print(f"  {key:<{width}} = {'null' if value is None else value}")
        return 0
    out = Path(args.out) if args.out else layout.at(cfg, layout.RUN_DIR, run_id=run_id)
    with torch_threads(args.threads, cfg, "threads_per_run"):
        d = distributed.setup(settings.device)
        try:
            _check_init(cfg, settings)
            trainer = Trainer(cfg, run_id, settings, out, d, experiment, started=started)  # reads its inputs only
            # The run directory is this process's from here (rank 0 writes it), or it stops before the first step.
            with rundir.hold(out) if d.is_main else contextlib.nullcontext():
                args.snapshot_path = out / layout.SNAPSHOT_FILE  # named if the run is interrupted
                summary = trainer.run(on_mismatch=args.on_mismatch)
        finally:
            distributed.teardown(d)
    if d.is_main:
        print(
            f"run {run_id}: {summary['status']}, eval accuracy {summary['initial']['eval_accuracy']:.3f} -> "
            f"{summary['final']['eval_accuracy']:.3f} (best {summary['best']['eval_accuracy']:.3f}) in "
            f"{summary['wall_seconds']:.1f}s"
        )
    return 0


def _check_init(cfg: dict, s) -> None:
    """The checkpoint a run starts from exists; where it does not, the message says what makes it (a file the user
    named is theirs to find: no command makes it)."""
    path = layout.init_checkpoint(cfg["results"], s.task, s.init)
    if path is None or path.is_file():
        return
    if s.init is None:
        how = f"the warm-up writes it: `mathrl sft --task {s.task}`"
    elif layout.is_start(s.init):
        how = f"the warm-up's starts are written by `mathrl sft --task {s.task} --starts` (sft.{s.task}.starts)"
    else:
        how = "init is a checkpoint file, start_PCT (a start of the warm-up), random, or null (the task's warm-up)"
    raise ConfigError(f"run.init: {s.init if s.init is not None else 'null'}: {path} does not exist; {how}")


def _check_memory(cfg: dict, s, world: int) -> str:
    """Refuse, before anything loads, a step that needs more memory than the device has;
    else say how much it needs."""
    import torch

    from mathrl.engine.memory import size, step_memory
    from mathrl.engine.model import PRESETS
    from mathrl.engine.tasks import VOCAB_SIZE, task_of
    from mathrl.pipeline.limits import available_memory

    preset = cfg["sft"][s.task]["preset"]  # the warm-up's model, which the run starts from
    dims = {k: PRESETS[preset][k] for k in ("n_layer", "n_head", "n_embd")}
    task = task_of(cfg, s.task)
    need = step_memory(
        batch_size=s.batch_size,
        world_size=world,
        micro_batch_size=s.micro_batch_size,
        group_size=s.group_size,
        prompt_len=task.prompt_len,
        answer_len=task.answer_len,
        vocab_size=VOCAB_SIZE,
        **dims,
    )
    on_gpu = s.device in ("cuda", "auto") and torch.cuda.is_available()  # cuda without one: refused at set-up
    if on_gpu:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        have, where = torch.cuda.mem_get_info(local % torch.cuda.device_count())[0], "free on the GPU"
        total = need["total"]
    else:  # the ranks of one machine share its memory
        have, where = available_memory() or (None, "")
        total = need["total"] * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if have is not None and total > have:
        parts = ", ".join(f"{k.replace('_', ' ')} {size(v)}" for k, v in need.items() if k != "total")
        raise ConfigError(
            f"run.batch_size: {s.batch_size} rollouts need about {size(total)} per step (preset {preset}: {parts}), "
            f"{size(have)} is {where}; use a smaller batch_size (micro_batch_size bounds the training term only)"
        )
    return f"a step needs about {size(total)}" + (f" of the {size(have)} {where}" if have is not None else "")


def cmd_gradvar(args) -> int:
    import json as _json

    import torch

    from mathrl.analysis.estimators import noise_scale
    from mathrl.engine.gradvar import accumulation_difference, gradient_moments
    from mathrl.engine.sft import load_policy
    from mathrl.engine.tasks import read_problems, task_of
    from mathrl.pipeline.atomic import atomic_write
    from mathrl.pipeline.layout import problems_file, sft_checkpoint

    cfg = _load(args)
    _check_task(cfg, [args.task])
    g, task = cfg["gradvar"], task_of(cfg, args.task)
    init = Path(args.init) if args.init else sft_checkpoint(cfg, args.task)
    policy, _ = load_policy(init)
    pairs = read_problems(problems_file(cfg, args.task, "train"), task)
    torch.manual_seed(g["seed"])
    moments = gradient_moments(
        policy, task, pairs, g["batch_sizes"], g["num_samples"], g["group_size"], g["seed"], g["temperature"]
    )
    variance = {n: m["variance"] for n, m in moments.items()}
    batch, micro = g["accumulation"]
    small, big = min(moments), max(moments)
    result = {
        "task": args.task,
        "init": str(init),
        "settings": g,
        "variance": [{"batch_size": n, **m} for n, m in moments.items()],
        "noise_scale": {
            "small": small,
            "big": big,
            **noise_scale(small, big, moments[small]["sq_norm"], moments[big]["sq_norm"]),
        }
        if small < big
        else None,
        "accumulation": accumulation_difference(
            policy, task, pairs, batch, micro, g["group_size"], g["seed"], g["temperature"]
        ),
    }
    out = Path(args.out) if args.out else layout.at(cfg, layout.GRADVAR, task=args.task)
    atomic_write(out, _json.dumps(result, indent=2) + "\n")
    lo, hi = min(variance), max(variance)
    ratio = variance[lo] / variance[hi] if variance[hi] > 0 else float("nan")  # zero when every reward is equal
    print(
        f"gradvar {args.task}: variance {variance[lo]:.3e} at {lo} vs {variance[hi]:.3e} at {hi} "
        f"(ratio {ratio:.2f}); accumulation max difference "
        f"{result['accumulation']['max_abs_difference']:.2e}"
    )
    return 0


def launch_options(args) -> list[str]:
    """The `mathrl launch` options of parsed `args` as words, `--parallel` aside: what each of a group's launches
    gets (cmd_launch)."""
    words = [
        "--threads",
        str(args.threads),
        "--runs-per-gpu",
        str(args.runs_per_gpu),
        "--torchrun",
        args.torchrun,
        "--fork-server",
        args.fork_server,
        *(f"--torchrun-arg={arg}" for arg in args.torchrun_arg),
    ]
    words += ["--gpus", str(args.gpus)] if args.gpus is not None else []
    words += ["--lock-dir", str(args.lock_dir)] if args.lock_dir else []
    return words + (["--dry-run"] if args.dry_run else [])


def cmd_launch(args) -> int:
    from mathrl.pipeline.launch import launch, parallel_count, run_all, run_shares

    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    try:
        if args.parallel != "1":  # the runs between launches running at once, each one after another
            shares = run_shares(train_args, parallel_count(args.parallel, args.threads, args.gpus, args.runs_per_gpu))
            if len(shares) > 1:
                head = [sys.executable, "-m", "mathrl", "launch", *launch_options(args), "--"]
                return run_all([[*head, *share] for share in shares])
        return launch(
            train_args,
            gpus=args.gpus,
            threads=args.threads,
            lock_dir=args.lock_dir,
            dry_run=args.dry_run,
            torchrun_args=args.torchrun_arg,
            torchrun=args.torchrun,
            fork_server=args.fork_server,
            runs_per_gpu=args.runs_per_gpu,
            check=lambda world: check_train_args(train_args, world),
        )
    except (ValueError, TimeoutError) as exc:
        print(f"mathrl launch: error: {exc}", file=sys.stderr)
        return USAGE_ERROR


def check_train_args(argv: list[str], world_size: int) -> None:
    """What `mathrl train ARGV` in a world of `world_size` would refuse for its configuration."""
    import contextlib
    import io

    from mathrl.pipeline.config import check_train

    train = build_parser().parse_args(["train", *argv])
    cfg = _load(train)
    for name in train.run or [None]:
        with contextlib.redirect_stderr(io.StringIO()):  # its notes are the run's to print
            _, _, settings = resolve_run(cfg, name, train.run_id, train.overrides)
        check_train(cfg, settings.as_dict(), "run", world_size=world_size)


def cmd_runs(args) -> int:
    cfg = _load(args)
    if args.experiment is not None:
        _check_name("--experiment", args.experiment, "an experiment", cfg["experiments"])
    from mathrl.analysis.results import adhoc_progress, progress_of
    from mathrl.pipeline.config import expand_runs

    show = args.status or sys.stdout.isatty()  # piped: the bare ids, one a line, for scripts
    runs = expand_runs(cfg)
    for run_id, spec in runs.items():
        if not args.experiment or spec.experiment == args.experiment:
            print(f"{run_id}  {progress_of(cfg, spec)}" if show else run_id)
    if show and not args.experiment:  # not piped: an ad hoc id is nothing `mathrl train --run` could train
        for run_id, progress in adhoc_progress(cfg, {spec.trained_as for spec in runs.values()}).items():
            print(f"{run_id}  {progress}, ad hoc (no run of the config)")
    return 0


def cmd_settings(args) -> int:
    from mathrl.pipeline.config import load_schema
    from mathrl.pipeline.settings import listing

    cfg = _load(args)
    text = listing(cfg["train"], load_schema()["definitions"]["train"]["properties"], args.names)
    if not text:
        raise ConfigError(
            f"no run setting's name contains {' or '.join(map(repr, args.names))}; `mathrl settings` lists them all"
        )
    print(text)
    return 0


def cmd_compare(args) -> int:
    from mathrl.analysis import figure_style
    from mathrl.analysis.compare import BOUNDS, MEASURES, arm_values, compare, figure, group_by_settings, read_run, text
    from mathrl.pipeline.atomic import atomic_write

    if args.measure not in MEASURES:
        raise ConfigError(f"--measure: {args.measure!r} is not a measure; allowed: {', '.join(MEASURES)}")

    cfg = _load(args)
    runs_dir = layout.at(cfg, layout.RUNS)
    if args.imported:
        from mathrl.analysis.imported import load_set

        given = Path(args.imported)
        cfg, found = load_set(given if given.is_dir() else layout.at(cfg, layout.IMPORTED, name=args.imported))
        groups = {}
        for run_id, run in found.items():
            groups.setdefault(run.spec.variant, {})[run_id] = run
        roles = next(iter(cfg["experiments"].values()))["roles"]
        default_base = roles.get("baseline") or roles.get("reference")
        args.experiment = next(iter(cfg["experiments"]))
    elif args.experiment:
        groups, default_base, skipped = _experiment_arms(cfg, args.experiment, runs_dir)
        unreadable = [run.problem for run in skipped.values() if run.status == "unreadable"]
        not_yet = [run_id for run_id, run in skipped.items() if run.status != "unreadable"]
        if not_yet:
            print(
                f"compare: {len(not_yet)} runs of {args.experiment} have no result yet and are left out: "
                f"{', '.join(not_yet)}",
                file=sys.stderr,
            )
        if unreadable:  # named by path: never a smaller n in silence
            print(
                f"compare: {len(unreadable)} runs of {args.experiment} are left out, their files unreadable:",
                *unreadable,
                sep="\n  ",
                file=sys.stderr,
            )
    elif args.arm:
        groups, default_base = {}, None
        for item in args.arm:
            name, sep, runs = item.partition("=")
            if not sep or not name or not runs.strip(","):
                raise ConfigError(f"--arm: {item!r} is not NAME=RUN,RUN,...; e.g. --arm A=run1,run2")
            if name in groups:
                raise ConfigError(f"--arm: arm {name!r} is given twice")
            groups[name] = {r: read_run(runs_dir, r, "--arm") for r in runs.split(",") if r}
    else:
        found = {r: read_run(runs_dir, r, "--runs") for r in dict.fromkeys(args.runs)}
        by_settings = group_by_settings({r: run.summary for r, run in found.items()})
        groups = {name: {r: found[r] for r in ids} for name, ids in by_settings.items()}
        default_base = None
    if len(groups) < 2:
        how = (
            f"train {args.experiment}'s runs first (`mathrl runs --status --experiment {args.experiment}`)"
            if args.experiment
            else "--arm NAME=RUN,... twice, or --runs of different settings"
        )
        raise ConfigError(
            f"compare: {len(groups)} arm ({', '.join(groups) or 'none'}) with results; a comparison "
            f"needs two or more ({how})"
        )
    arms = {name: arm_values(runs, args.measure) for name, runs in groups.items()}
    baseline = args.baseline or default_base or next(iter(arms))
    _check_name("--baseline", baseline, "an arm", arms)
    table = compare(arms, baseline, BOUNDS.get(args.measure))
    table.insert(0, "measure", args.measure)
    print(text(table, args.measure))
    name = f"{args.experiment or 'compare'}_{args.measure}"
    csv = Path(args.out) if args.out else layout.at(cfg, layout.COMPARE, name=name)
    png = csv.with_suffix(".png")
    drawn = figure_style.png(figure(table, arms, args.measure))
    atomic_write(csv, table.to_csv(index=False).encode())
    atomic_write(png, drawn)
    print(f"compare: {csv}, {png}")
    return 0


def cmd_import(args) -> int:
    """Logs of other frameworks into a results tree of their own: run folders, alerts, claims, report.html."""
    import os

    from mathrl.analysis.imported import build

    cfg = _load(args)
    given = [Path(p) for p in args.logs]
    out = Path(args.out) if args.out else layout.at(cfg, layout.IMPORTED, name=_set_name(args, given))
    if out.exists() and any(out.iterdir()) and not (out / "import.json").is_file():
        raise ConfigError(f"--out: {out} exists and holds no imported set; name an empty or new folder")
    report = os.path.relpath(layout.at(cfg, layout.REPORT), out)
    command = "mathrl import " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["import"] else "mathrl import"
    done = build(given, Path(args.arms) if args.arms else None, out, report, command)
    runs = done["runs"]
    arms = sorted({r.arm for r in runs})
    print(f"import {done['name']}: {len(runs)} runs in {len(arms)} arms ({', '.join(arms)}) into {out}")
    for r in runs:
        unmapped = [k for k in r.log.keys if k not in r.mapping.values()]
        notes = [f"{len(r.mapping)} columns mapped", f"{len(unmapped)} keys kept unmapped"]
        notes += [f"cut short: {r.log.truncated}"] if r.log.truncated else []
        print(f"  {r.run_id}: {r.log.source} ({r.log.format}); " + "; ".join(notes))
    t = done["tables"]
    alerts, arm_alerts = t["imported_alerts"], t["imported_arm_alerts"]
    print(
        f"alerts: {len(alerts)} in {alerts['run_id'].nunique() if len(alerts) else 0} runs"
        + "".join(f"; {a.arm}: {a.kind}" for a in arm_alerts.itertuples())
    )
    for c in t["claims"].itertuples():
        print(f"claim {c.claim_id}: {c.outcome} ({c.difference:+.4g} [{c.ci_low:+.4g}, {c.ci_high:+.4g}], n={c.n})")
    print(f"report: {done['report']}")
    return 0


def _set_name(args, given: list[Path]) -> str:
    """The set's folder name: the --arms file's `name`, else the logs' folder."""
    if args.arms:
        from mathrl.analysis.imported import read_arms_file

        name = read_arms_file(Path(args.arms)).get("name")
        if name:
            return str(name)
    first = given[0].resolve()
    return (first if first.is_dir() else first.parent).name or "imported"


def _experiment_arms(cfg: dict, experiment: str, runs_dir: Path) -> tuple[dict, str | None, dict]:
    """An experiment's settings as arms ({setting: {run id: Run}}), its baseline (the
    `baseline` or `reference` role), and the runs without a result ({run id: Run}: missing, stale or unreadable)."""
    from mathrl.analysis.results import load_run
    from mathrl.pipeline.config import expand_runs, point_label

    _check_name("--experiment", experiment, "an experiment", cfg["experiments"])
    groups: dict[str, dict] = {}
    skipped = {}
    for run_id, spec in expand_runs(cfg).items():
        if spec.experiment != experiment:
            continue
        arm = spec.variant or point_label(spec.point) or "base"
        groups.setdefault(arm, {})
        run = load_run(runs_dir / spec.trained_as, spec)
        if run.ok:
            groups[arm][run_id] = run
        else:
            skipped[run_id] = run
    groups = {arm: runs for arm, runs in groups.items() if runs}
    roles = cfg["experiments"][experiment].get("roles") or {}
    base = roles.get("baseline") or roles.get("reference")
    return groups, base if base in groups else None, skipped


def cmd_bandit(args) -> int:
    from mathrl.engine import bandit

    cfg = _load(args)
    block = cfg.get("bandit")
    if not block:
        raise ConfigError("bandit: the config has no bandit block")
    if args.study is not None:
        _check_name("--study", args.study, "a bandit study", bandit.BANDIT_STUDIES)
    studies = [args.study] if args.study else list(bandit.BANDIT_STUDIES)
    for study in studies:
        with torch_threads(0, cfg, "threads_other"):  # the pipeline's count; tiny tensors run fastest on one
            df = bandit.run_study(study, block)
        out = Path(args.out) if args.out and args.study else layout.at(cfg, layout.BANDIT, study=study)
        bandit.write_study(df, out)
        print(f"bandit {study}: {len(df)} rows in {out}")
    return 0


def cmd_aggregate(args) -> int:
    from mathrl.analysis.aggregate import aggregate

    cfg = _load(args)
    from mathrl.analysis.results import missing_inputs

    counts, stale, unreadable = aggregate(cfg, args.out)
    missing = len(missing_inputs(cfg))
    print(f"aggregate: {len(counts)} tables in {args.out or Path(cfg['results']) / 'tables'}")
    if missing:
        print(
            f"aggregate: {missing} input files are missing (runs not trained yet are marked missing); "
            "these tables are not the pipeline's: `snakemake report` makes the missing inputs and redoes "
            "them"
        )
    if stale:
        print(
            f"aggregate: {len(stale)} run(s) were trained with settings other than the config's (a results tree "
            "from another commit or config?); the tables leave them out and are not the pipeline's:",
            *stale[:10],
            *(["..."] if len(stale) > 10 else []),
            sep="\n  ",
            file=sys.stderr,
        )
    if unreadable:  # every one by path: a damaged file is never read in part, nor left out unsaid
        left_out = "the tables leave them out (a claim's n counts the others; the report lists them)"
        print(
            f"aggregate: {len(unreadable)} run(s) have files that do not read whole; {left_out}, and the tables are "
            "not the pipeline's:",
            *unreadable,
            sep="\n  ",
            file=sys.stderr,
        )
    return 1 if stale or unreadable else 0


def cmd_claims(args) -> int:
    """The declared claims (id, kind, source, statement) and, where claims.csv exists, their outcomes."""
    from mathrl.analysis import claims

    cfg = _load(args)
    if args.measures:
        from mathrl.analysis.measures import BANDIT_TABLES, RUN_TABLES
        from mathrl.analysis.measures.catalog import listing

        print(listing({**RUN_TABLES, **BANDIT_TABLES}))
        return 0
    if args.coverage:
        from mathrl.analysis import coverage

        table = coverage.table(cfg)
        cols = ["document", "section", "claim_ids", "translation", "status", "why"]
        print(table[cols].to_string(index=False, max_colwidth=args.width))
        print("\n" + "; ".join(f"{k}: {n}" for k, n in table["status"].value_counts().items()) + " (document rows)")
        return 0
    done = layout.at(cfg, layout.CLAIMS)
    if done.is_file():  # outcomes judged from tables of another config, or with runs left out: said first
        _warn_if_tables_differ(args, cfg)
        _warn_if_runs_unreadable(args, cfg)
    table = claims.listing(cfg, done if done.is_file() else None, kind=args.kind)
    print(table.to_string(index=False, max_colwidth=args.width) if len(table) else "no claims")
    if not done.is_file():
        print(
            f"\n{len(table)} claims declared; no outcomes yet ({done} does not exist: `mathrl aggregate` judges them)"
        )
    else:
        print("\n" + "; ".join(f"{k}: {n}" for k, n in table["outcome"].value_counts().items()) + f" (from {done})")
    return 0


def cmd_figures(args) -> int:
    from mathrl.analysis.plots import figures

    cfg = _load(args)
    _warn_if_tables_differ(args, cfg)
    names = figures(cfg, args.out)
    print(f"figures: {len(names)} figures in {args.out or layout.at(cfg, layout.FIGURES)}")
    return 0


def cmd_report(args) -> int:
    from mathrl.analysis.report import write_report

    cfg = _load(args)
    _warn_if_tables_differ(args, cfg)
    path, warnings = write_report(cfg, args.out, getattr(args, "full_results", None))
    for warning in warnings:
        print(f"mathrl report: warning: {warning}", file=sys.stderr)
    print(f"report: {path}")
    return 0


def _warn_if_runs_unreadable(args, cfg: dict) -> None:
    from mathrl.analysis.study_inputs import Tables

    runs = Tables(cfg)["runs"]
    if "status" in runs and (runs["status"] == "unreadable").any():
        n = runs.loc[runs["status"] == "unreadable", "run_id"].nunique()
        print(
            f"mathrl {args.command}: warning: {n} run(s) had files that do not read whole when the tables were made "
            "(`mathrl aggregate` names them): the claims on their experiments count the other runs",
            file=sys.stderr,
        )


def _warn_if_tables_differ(args, cfg: dict) -> None:
    from mathrl.analysis.study_inputs import Tables

    mismatch = Tables(cfg).config_mismatch()
    if mismatch:
        print(f"mathrl {args.command}: warning: {mismatch}", file=sys.stderr)


def cmd_dvc_yaml(args) -> int:
    from mathrl.pipeline.atomic import atomic_write
    from mathrl.pipeline.config import ROOT
    from mathrl.pipeline.dvcgen import dvc_files

    out = Path(args.out) if args.out else ROOT / "dvc.yaml"
    for name, text in dvc_files(args.config or [], root=out.resolve().parent, python=args.python).items():
        path = out if name == "dvc.yaml" else out.parent / name  # the params file beside it (its `vars:`)
        atomic_write(path, text)
        print(f"dvc-yaml: {path}")
    return 0


def _check_task(cfg: dict, names) -> None:
    for name in names:
        _check_name("--task", name, "a task", cfg["tasks"])


def _check_name(flag: str, name: str, what: str, allowed) -> None:
    """A name given on the command line must be one the config (or the code) defines."""
    if name not in allowed:
        import difflib

        close = difflib.get_close_matches(name, list(allowed), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{flag}: {name!r} is not {what}{hint}; allowed: {', '.join(allowed)}")


def _add_compare(sub) -> None:
    p = sub.add_parser("compare", help="arms of runs on one measure: means, differences and their 95%% intervals")
    _common(p)
    arms = p.add_mutually_exclusive_group(required=True)
    arms.add_argument("--arm", action="append", metavar="NAME=RUN,RUN", help="an arm and its runs, repeatable")
    arms.add_argument("--runs", nargs="+", metavar="RUN", help="runs, grouped into arms by their settings but the seed")
    arms.add_argument("--experiment", help="an experiment: its variants (or grid points) are the arms")
    arms.add_argument(
        "--imported",
        metavar="NAME",
        help="a set of `mathrl import` (its name under results/imported/, or its folder): its arms",
    )
    p.add_argument(
        "--baseline",
        help="the arm the others are compared with (default: the experiment's baseline "
        "or reference role, else the first arm)",
    )
    p.add_argument(
        "--measure",
        default="final_eval",  # checked when the command runs: mathrl.analysis.compare imports pandas
        help="one number per run (default final_eval, the final held-out accuracy; an unknown name lists the others)",
    )
    p.add_argument(
        "--out",
        metavar="FILE.csv",
        help="the table; the figure goes beside it as .png (default results/compare/NAME_MEASURE.csv)",
    )
    p.set_defaults(func=cmd_compare)


def _add_import(sub) -> None:
    p = sub.add_parser(
        "import",
        help="other frameworks' logs (TRL, verl, OpenRLHF, TensorBoard, W&B CSV) as runs: "
        "monitor, remedies, claims and a report",
    )
    _common(p)
    p.add_argument(
        "logs",
        nargs="+",
        metavar="LOG",
        help="log files or folders: TRL checkpoints (trainer_state.json), TensorBoard event folders, "
        "verl console logs, W&B CSV exports, JSON lines",
    )
    p.add_argument(
        "--arms",
        metavar="FILE.yaml",
        help="arms and seeds (arm: [run patterns] or {seed: pattern}), roles, metric names and claims; "
        "default: arms and seeds from the folder names (ARM_s0, ARM-seed1, ARM/seed2)",
    )
    p.add_argument("--out", metavar="DIR", help="the set's folder (default results/imported/NAME)")
    p.set_defaults(func=cmd_import)


def _add_settings(sub) -> None:
    p = sub.add_parser("settings", help="list the run settings (train's KEY=VALUE): value, range and help")
    _common(p)
    p.add_argument("names", nargs="*", metavar="NAME", help="only settings whose name contains NAME, e.g. kl")
    p.set_defaults(func=cmd_settings)


def _count(text: str) -> int:
    """An argparse type: a whole number >= 0 (anything else is argparse's usage error, status 2)."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; use a whole number >= 0")
    return int(text)


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error in one line (the command's usage is its --help; `mathrl train`'s is long)."""

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (`{self.prog} --help` lists the arguments)\n")


class _TrainHelp(argparse.HelpFormatter):
    """`mathrl train --help` ends with every run setting (KEY) and its help, the schema's words
    carried by each RunSettings field; read only when the help is printed."""

    def format_help(self) -> str:
        import textwrap

        from mathrl.pipeline.settings import FIELDS

        lines = ["", "run settings (KEY=VALUE):"]
        for name, f in FIELDS.items():
            lines.append(
                textwrap.fill(f.metadata["help"], 100, initial_indent=f"  {name}: ", subsequent_indent="      ")
            )
        return super().format_help() + "\n".join(lines) + "\n"


def _add_train(sub) -> None:
    p = sub.add_parser(
        "train",
        help="one RL run (alone or under torchrun)",
        formatter_class=_TrainHelp,
        epilog="`mathrl settings` lists every KEY with its value, range and help.",
    )
    _common(p)
    # --experiment-run is the same flag under a name that is no prefix of a torchrun option
    # (torchrun's parser reads `--run` as an ambiguous abbreviation of its --run-path).
    p.add_argument(
        "--run",
        "--experiment-run",
        dest="run",
        action="append",
        help="run id of an experiment (see `mathrl runs`); repeated, the runs are trained one after "
        "another in this process (as the pipeline trains a setting's seeds), each writing its "
        "console lines to its own log (--run-logs)",
    )
    p.add_argument(
        "--run-logs",
        action="store_true",
        help="each --run's console lines go to <results>/logs/train/RUN.log, and one line per run to the "
        "console (implied by more than one --run)",
    )
    p.add_argument(
        "--on-mismatch",
        choices=["error", "restart"],
        default="error",
        help=(
            "a snapshot from other settings or another start checkpoint: stop with an error (default), "
            "or set it aside as snapshot.stale.pt and start over (the pipeline's choice after a config change)"
        ),
    )
    p.add_argument(
        "--run-id",
        help="name of an ad hoc run (default: adhoc); with --run, a variant of that run: its settings, then KEY=VALUE",
    )
    p.add_argument("--out", help="run directory (default results/runs/RUN_ID)")
    p.add_argument(
        "--threads",
        type=_count,
        default=0,
        help="torch CPU threads per process (default 0: OMP_NUM_THREADS where set, else the pipeline's "
        "pipeline.threads_per_run, so that a run by hand reproduces the pipeline's)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the run's resolved settings and where it would write; train nothing",
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="run settings, e.g. lr=1e-3 batch_size=64 (`mathrl settings` lists them)",
    )
    p.set_defaults(func=cmd_train)


def _add_launch(sub) -> None:
    p = sub.add_parser(
        "launch",
        help="one `mathrl train` under torchrun on GPUs of its own (for concurrent jobs)",
        usage="mathrl launch [--gpus N] [--runs-per-gpu K] [--threads T] [--lock-dir DIR] "
        "[--torchrun always|auto] [--torchrun-arg ARG] [--parallel K|auto] "
        "[--fork-server auto|off] [--dry-run] -- <mathrl train args>",
    )
    p.add_argument(
        "--gpus",
        type=int,
        help="GPUs to lease, one worker each (default: 1 if a GPU is visible, else 0 = one CPU worker)",
    )
    p.add_argument(
        "--runs-per-gpu",
        type=int,
        default=1,
        metavar="K",
        help="launches that may share one GPU at once (K lock slots a GPU; default 1)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads of the job, split between workers (OMP/MKL_NUM_THREADS; default 1)",
    )
    p.add_argument(
        "--lock-dir",
        type=Path,
        help="GPU slot locks shared by the node's jobs (default $MATHRL_GPU_LOCK_DIR or /tmp/mathrl-gpu-locks-$USER)",
    )
    p.add_argument(
        "--torchrun-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra torchrun flag, repeatable, e.g. --torchrun-arg=--max-restarts=2",
    )
    p.add_argument("--dry-run", action="store_true", help="print the command and its environment, run nothing")
    p.add_argument(
        "--torchrun",
        choices=["always", "auto"],
        default="always",
        help="auto: a single CPU worker runs without torchrun's agent (saves ~2 s per run); default always",
    )
    p.add_argument(
        "--parallel",
        default="1",
        metavar="K",
        help="several --experiment-run: dealt out to K launches running at once, each training its share "
        "one after another on --threads threads (auto: as many as the CPUs give --threads each and "
        "the GPU slots allow); default 1",
    )
    p.add_argument(
        "--fork-server",
        choices=["auto", "off"],
        default="off",
        help="auto: a lone CPU worker (no GPU, outside SLURM) is forked from a per-user server that has "
        "imported torch once, instead of a fresh interpreter (saves ~2.5 s per run); default off",
    )
    p.add_argument("train_args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="arguments for `mathrl train`")
    p.set_defaults(func=cmd_launch)


def build_parser() -> argparse.ArgumentParser:
    from mathrl import __version__

    parser = Parser(prog="mathrl", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"mathrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")

    p = sub.add_parser("problems", help="write the seeded train, validation and held-out test problem sets")
    _common(p)
    p.add_argument("--task", help="one task (default: all)")
    p.set_defaults(func=cmd_problems)

    _add_sft(sub)
    _add_train(sub)

    _add_launch(sub)

    p = sub.add_parser(
        "gradvar", help="gradient variance at several batch sizes from one policy, and the accumulation check"
    )
    _common(p)
    p.add_argument("--task", required=True)
    p.add_argument("--init", help="checkpoint to probe (default: the task's warm-up model)")
    p.add_argument("--out", help="JSON path (default results/gradvar/TASK.json)")
    p.set_defaults(func=cmd_gradvar)

    _add_settings(sub)
    _add_compare(sub)
    _add_import(sub)

    _add_runs_and_tables(sub)
    _claims_parser(sub)
    p = sub.add_parser("bandit", help="lab 04's bandit studies")
    _common(p)
    p.add_argument("--study", help="one study (default: all)")
    p.add_argument("--out", help="CSV path (with --study)")
    p.set_defaults(func=cmd_bandit)

    _add_dvc_yaml(sub)
    return parser


def _add_sft(sub) -> None:
    p = sub.add_parser("sft", help="supervised warm-up of a task's model into its accuracy band")
    _common(p)
    p.add_argument("--task", required=True, help="the task whose warm-up to train (a key of tasks:)")
    p.add_argument(
        "--threads",
        type=_count,
        default=0,
        help="torch CPU threads (default 0: OMP_NUM_THREADS where set, else the pipeline's "
        "pipeline.threads_sft, so that a warm-up run by hand ends on the pipeline's checkpoint)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        action="append",
        help="one of the task's independent warm-ups, 0..sft.TASK.warmups-1, repeatable (default: each in turn)",
    )
    p.add_argument(
        "--parallel",
        default="1",
        metavar="K",
        help="the warm-ups dealt out to K processes running at once, each on the threads one process "
        "would have (auto: as many as the CPUs give those threads and the GPU slots allow); default 1",
    )
    p.add_argument(
        "--starts",
        action="store_true",
        help="from the warm-up's checkpoint: the further starts (sft.TASK.starts) and the supervised controls",
    )
    p.add_argument(
        "--out",
        help="output directory of one warm-up (default results/sft/TASK/wK, with --starts results/sft/TASK/wK/starts)",
    )
    p.set_defaults(func=cmd_sft)


def _add_runs_and_tables(sub) -> None:
    p = sub.add_parser("runs", help="list the run ids the experiments expand into")
    _common(p)
    p.add_argument("--experiment", help="only this experiment's runs")
    p.add_argument(
        "--status",
        action="store_true",
        help="each run's status: done, partial (a snapshot, no result yet), failed, stale (trained "
        "with other settings than the config's) or missing, then the run directories of no run of "
        "the config, ad hoc (the default on a terminal; piped, only the config's run ids)",
    )
    p.set_defaults(func=cmd_runs)

    for name, func, what in [
        ("aggregate", cmd_aggregate, "one CSV per report table under results/tables/"),
        ("figures", cmd_figures, "every figure under results/figures/ from the tables"),
        ("report", cmd_report, "results/report.html from the tables and figures"),
    ]:
        p = sub.add_parser(name, help=what)
        _common(p)
        p.add_argument("--out", help="output path (default under the results directory)")
        if name == "report":
            p.add_argument(
                "--full-results",
                metavar="DIR",
                help="the results directory of a config/full.yaml tree (the documents' scale): the "
                "report sets its outcomes beside this tree's",
            )
        p.set_defaults(func=func)


def _add_dvc_yaml(sub) -> None:
    p = sub.add_parser("dvc-yaml", help="write dvc.yaml (DVC stages over these commands) and its params file")
    p.add_argument(
        "--config",
        action="append",
        metavar="FILE",
        help="config file, repeatable, inside the repository (default config/config.yaml)",
    )
    p.add_argument(
        "--out",
        help="path of the dvc.yaml to write, dvc-params.yaml beside it; its directory is the "
        "repository root (default dvc.yaml)",
    )
    p.add_argument(
        "--python", default=".venv/bin/python", help="interpreter the stages run mathrl with (default .venv/bin/python)"
    )
    p.set_defaults(func=cmd_dvc_yaml)


def _claims_parser(sub) -> None:
    p = sub.add_parser(
        "claims", help="the declared claims and, once the tables exist, their outcomes (results/tables/claims.csv)"
    )
    _common(p)
    p.add_argument(
        "--kind", choices=["document", "setup", "reference", "beyond", "user"], help="only claims of this kind"
    )
    p.add_argument(
        "--measures",
        action="store_true",
        help="list the registered measures, what each means and the tables claims read it in",
    )
    p.add_argument(
        "--coverage",
        action="store_true",
        help="the operationalisation table: every claim-bearing row of the four documents, its claims and status",
    )
    p.add_argument("--width", type=int, default=70, help="widest column shown (default 70 characters)")
    p.set_defaults(func=cmd_claims)


INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


LISTINGS = ("runs", "claims", "settings")  # commands that only print a listing: a closed pipe ends them quietly


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Under torchrun every rank meets the same configuration and the same Ctrl-C: rank 0 says so.
    quiet = int(os.environ.get("RANK", "0")) != 0
    try:
        return args.func(args)
    except (ConfigError, ProblemFileError, SnapshotError, RunDirError, DamagedFileError) as exc:
        if not quiet:
            print(f"mathrl {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        if not quiet:
            print(f"\nmathrl {args.command}: interrupted{_where_to_resume(args)}", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader stopped reading (`mathrl runs | head -1`): no more output, and no error
        # for a listing; any other command did not finish, which it says on stderr.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if args.command in LISTINGS:
            return 0
        print(
            f"mathrl {args.command}: stopped: its output was closed (broken pipe){_where_to_resume(args)}",
            file=sys.stderr,
        )
        return 1
    except OSError as exc:  # a full disk, a read-only results directory: no traceback, exit 1
        print(f"mathrl {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except (MemoryError, RuntimeError) as exc:
        said = out_of_memory(exc)
        if said is None:
            raise
        if not quiet:
            print(f"mathrl {args.command}: error: {said}{_where_to_resume(args)}", file=sys.stderr)
        return 1


def out_of_memory(exc: BaseException) -> str | None:
    """One line for an allocation that failed (Python's MemoryError, torch's allocators' errors), else None: the
    pre-flight estimate of a step's memory is an estimate, and a limit can tighten while a run trains."""
    text = str(exc).strip()
    if not (
        isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or "can't allocate memory" in text
    ):
        return None
    text = text.split("DefaultCPUAllocator: ", 1)[-1].splitlines()[0] if text else "an allocation failed"
    return (
        f"out of memory: {text}; a smaller batch_size (or micro_batch_size, which bounds the training "
        "activations) needs less"
    )


def _where_to_resume(args) -> str:
    """For a stopped `mathrl train`: the step its snapshot holds, where the same command resumes."""
    path = getattr(args, "snapshot_path", None)
    if path is None:
        return ""
    from mathrl.engine import snapshot

    try:
        found = snapshot.load_found(path)
    except Exception as exc:  # noqa: BLE001 - torch raises several types for a damaged file
        return f"; {exc}"
    if found is None:
        return f"; no snapshot yet in {path.parent}: the same command starts it over"
    st, used = found
    return f"; the same command resumes {st['run_id']} from its snapshot at step {st['step']} ({used})"
