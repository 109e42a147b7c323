rule sft:
    """Supervised warm-up of a task's model into its accuracy band."""
    input:
        unpack(get_sft_inputs),
    output:
        model=results("sft/{task}/model.pt"),
        summary=results("sft/{task}/summary.json"),
    log:
        results("logs/sft/{task}.log"),
    benchmark:
        results("benchmarks/sft/{task}.tsv")
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
        "{params.py:q} -m mathrl sft --config {params.config:q}"
        " --task {wildcards.task} > {log:q} 2>&1"
