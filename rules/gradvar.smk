rule gradvar:
    """Gradient variance at several batch sizes from a task's warm-up model, and the
    gradient-accumulation check."""
    input:
        unpack(get_gradvar_inputs),
    output:
        **outputs("gradvar"),
    log:
        log_of("gradvar"),
    benchmark:
        benchmark_of("gradvar")
    conda:
        "envs/mathrl.yaml"
    threads: PIPELINE["threads_other"]
    resources:
        mem_mb=PIPELINE["mem_mb_other"],
        runtime=PIPELINE["runtime_other"],
    params:
        settings=get_gradvar_hash,
        config=CONFIG_FILE,
        py=PY,
    shell:
        mathrl_shell("gradvar")
