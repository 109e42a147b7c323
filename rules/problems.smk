rule problems:
    """The seeded train and held-out test problem sets of a task."""
    output:
        train=results("problems/{task}/train.txt"),
        test=results("problems/{task}/test.txt"),
        meta=results("problems/{task}/meta.json"),
    log:
        results("logs/problems/{task}.log"),
    benchmark:
        results("benchmarks/problems/{task}.tsv")
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
        "{params.py:q} -m mathrl problems --config {params.config:q}"
        " --task {wildcards.task} > {log:q} 2>&1"
