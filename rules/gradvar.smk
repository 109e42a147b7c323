rule gradvar:
    """Gradient variance at several batch sizes from a task's warm-up model, and the
    gradient-accumulation check."""
    input:
        unpack(get_gradvar_inputs),
    output:
        json=results("gradvar/{task}.json"),
    log:
        results("logs/gradvar/{task}.log"),
    benchmark:
        results("benchmarks/gradvar/{task}.tsv")
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
        "{params.py:q} -m mathrl gradvar --config {params.config:q}"
        " --task {wildcards.task} --out {output.json:q} > {log:q} 2>&1"
