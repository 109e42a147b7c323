rule bandit:
    """One of lab 04's bandit studies: every setting and seed."""
    output:
        metrics=results("bandit/{study}/metrics.csv"),
    log:
        results("logs/bandit/{study}.log"),
    benchmark:
        results("benchmarks/bandit/{study}.tsv")
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
        "{params.py:q} -m mathrl bandit --config {params.config:q}"
        " --study {wildcards.study} --out {output.metrics:q} > {log:q} 2>&1"
