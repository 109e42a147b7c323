rule aggregate:
    """The report's tables, one CSV each, from every run, bandit study and probe."""
    input:
        unpack(get_aggregate_inputs),
    output:
        report(
            directory(results("tables")),
            patterns=["{name}.csv"],
            caption="../report/captions/tables.rst",
            category=get_report_section,
            subcategory="Tables",
            labels={"table": "{name}"},
        ),
        complete=TABLES_COMPLETE,
    log:
        results("logs/aggregate.log"),
    benchmark:
        results("benchmarks/aggregate/aggregate.tsv")
    conda:
        "envs/mathrl.yaml"
    threads: PIPELINE["threads_other"]
    resources:
        mem_mb=PIPELINE["mem_mb_other"],
        runtime=PIPELINE["runtime_other"],
    params:
        settings=get_summary_hash,
        config=CONFIG_FILE,
        py=PY,
    shell:
        "{params.py:q} -m mathrl aggregate --config {params.config:q} > {log:q} 2>&1"
