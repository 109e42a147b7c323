rule report:
    """The self-contained HTML report: every table and figure, and each stage's wall time
    (from the benchmarks)."""
    input:
        tables=results("tables"),
        figures=results("figures"),
        complete=TABLES_COMPLETE,
    output:
        report(
            results("report.html"),
            caption="../report/captions/report.rst",
            category="Report",
        ),
    log:
        results("logs/report.log"),
    benchmark:
        results("benchmarks/report/report.tsv")
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
        "{params.py:q} -m mathrl report --config {params.config:q} > {log:q} 2>&1"
