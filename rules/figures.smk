rule figures:
    """The report's figures, one PNG each, from the tables."""
    input:
        tables=results("tables"),
        complete=TABLES_COMPLETE,
    output:
        report(
            directory(results("figures")),
            patterns=["{name}.png"],
            caption="../report/captions/figures.rst",
            category=get_report_section,
            subcategory="Figures",
            labels={"figure": "{name}"},
        ),
    log:
        results("logs/figures.log"),
    benchmark:
        results("benchmarks/figures/figures.tsv")
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
        "{params.py:q} -m mathrl figures --config {params.config:q} > {log:q} 2>&1"
