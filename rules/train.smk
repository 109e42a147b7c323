# The run directory also holds snapshot.pt (and snapshot.pt.prev), deliberately not
# declared as outputs: Snakemake deletes a failed or killed job's outputs, and the snapshot
# must survive so that the rerun resumes from it.


# One job per group of runs (a setting's seeds, config.run_groups), each rule named
# train_<group>; each run still has its own outputs, log (logs/train/<run>.log, written by
# `mathrl train`) and snapshot. The job's own log and benchmark are the group's, and its time
# limit is the per-run limit times its runs (they train one after another; memory is one run's).
# Snakemake runs a loop's rules through one function, so the shell command is the same for
# every group and what differs comes in as params (a run id in the command string would train
# the last group's runs in every job).
for _group, _run_ids in RUN_GROUPS.items():

    rule:
        name:
            layout.group_job(_group)
        input:
            group_inputs(_run_ids),
        output:
            group_outputs(_run_ids),
        log:
            log_of("train").format(run_id=_group),
        benchmark:
            benchmark_of("train").format(run_id=_group)
        conda:
            "envs/mathrl.yaml"
        threads: PIPELINE["threads_per_run"]
        resources:
            gpu=GPUS_PER_RUN,
            mem_mb=PIPELINE["mem_mb_per_run"],
            runtime=PIPELINE["runtime_per_run"] * len(_run_ids),
        params:
            settings=group_hash(_run_ids),
            runs=layout.group_args(_run_ids),
            config=CONFIG_FILE,
            py=PY,
            torchrun=LaunchSetting(PIPELINE["torchrun"]),
            runs_per_gpu=LaunchSetting(PIPELINE["runs_per_gpu"]),
            fork_server=LaunchSetting("auto" if PIPELINE["fork_server"] else "off"),
        shell:
            mathrl_shell("train", group=True)
