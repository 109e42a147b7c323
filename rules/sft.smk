rule sft:
    """One of a task's independent supervised warm-ups, trained into its accuracy band."""
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


rule sft_starts:
    """A warm-up's further starts above its band and the supervised control from each."""
    input:
        unpack(get_sft_inputs),
        init=lambda wildcards: sft_checkpoint(wildcards.task, wildcards.warmup),
    output:
        **outputs("sft_starts"),
    log:
        log_of("sft_starts"),
    benchmark:
        benchmark_of("sft_starts")
    conda:
        "envs/mathrl.yaml"
    threads: PIPELINE["threads_sft"]
    resources:
        gpu=GPUS_SFT,
        mem_mb=PIPELINE["mem_mb_sft"],
        runtime=PIPELINE["runtime_sft"],
    params:
        settings=get_starts_hash,
        config=CONFIG_FILE,
        py=PY,
    shell:
        mathrl_shell("sft_starts")
