# The run directory also holds snapshot.pt (and snapshot.pt.prev), deliberately not
# declared as outputs: Snakemake deletes a failed or killed job's outputs, and the snapshot
# must survive so that the rerun resumes from it.


rule train:
    """One RL run of an experiment, under torchrun on GPU slots of its own (mathrl launch)."""
    input:
        unpack(get_run_inputs),
    output:
        **outputs("train"),
    log:
        log_of("train"),
    benchmark:
        benchmark_of("train")
    conda:
        "envs/mathrl.yaml"
    threads: PIPELINE["threads_per_run"]
    resources:
        gpu=GPUS_PER_RUN,
        mem_mb=PIPELINE["mem_mb_per_run"],
        runtime=PIPELINE["runtime_per_run"],
    params:
        settings=get_run_hash,
        config=CONFIG_FILE,
        py=PY,
        torchrun=LaunchSetting(PIPELINE["torchrun"]),
        runs_per_gpu=LaunchSetting(PIPELINE["runs_per_gpu"]),
        fork_server=LaunchSetting("auto" if PIPELINE["fork_server"] else "off"),
    shell:
        mathrl_shell("train")
