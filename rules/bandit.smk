rule bandit:
    """One of lab 04's bandit studies: every setting and seed."""
    output:
        **outputs("bandit"),
    log:
        log_of("bandit"),
    benchmark:
        benchmark_of("bandit")
    conda:
        "envs/mathrl.yaml"
    threads: PIPELINE["threads_other"]
    resources:
        mem_mb=PIPELINE["mem_mb_other"],
        runtime=PIPELINE["runtime_other"],
    params:
        settings=get_bandit_hash,
        config=CONFIG_FILE,
        py=PY,
    shell:
        mathrl_shell("bandit")
