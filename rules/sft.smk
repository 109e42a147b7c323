rule sft:
    """Supervised warm-up of a task's model into its accuracy band."""
    input:
        unpack(get_sft_inputs),
    output:
        **outputs("sft"),
    log:
        log_of("sft"),
    benchmark:
        benchmark_of("sft")
    conda:
        "envs/mathrl.yaml"
    threads: PIPELINE["threads_sft"]
    resources:
        gpu=GPUS_SFT,
        mem_mb=PIPELINE["mem_mb_sft"],
        runtime=PIPELINE["runtime_sft"],
    params:
        settings=get_sft_hash,
        config=CONFIG_FILE,
        py=PY,
    shell:
        mathrl_shell("sft")
