rule aggregate:
    """The report's tables, one CSV each, from every run, bandit study and probe."""
    input:
        unpack(get_aggregate_inputs),
        claims=CLAIMS_FILE,
        documents=DOCUMENTS_FILE,
    output:
        report(
            directory(outputs("aggregate")["tables"]),
            patterns=["{name}.csv"],
            caption="../report/captions/tables.rst",
            category=get_report_section,
            subcategory="Tables",
            labels={"table": "{name}"},
        ),
        complete=outputs("aggregate")["complete"],
    log:
        log_of("aggregate"),
    benchmark:
        benchmark_of("aggregate")
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
        mathrl_shell("aggregate")
