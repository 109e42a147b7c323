rule problems:
    """The seeded train and held-out test problem sets of a task."""
    output:
        **outputs("problems"),
    log:
        log_of("problems"),
    benchmark:
        benchmark_of("problems")
    conda:
        "envs/mathrl.yaml"
    threads: PIPELINE["threads_other"]
    resources:
        mem_mb=PIPELINE["mem_mb_other"],
        runtime=PIPELINE["runtime_other"],
    params:
        settings=get_task_hash,
        config=CONFIG_FILE,
        py=PY,
    shell:
        mathrl_shell("problems")
