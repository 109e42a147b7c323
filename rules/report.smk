rule report:
    """The self-contained HTML report: every table and figure, and each stage's wall time
    (from the benchmarks)."""
    input:
        tables=outputs("aggregate")["tables"],
        figures=outputs("figures")["figures"],
        complete=outputs("aggregate")["complete"],
    output:
        report(
            outputs("report")["report"],
            caption="../report/captions/report.rst",
            category="Report",
        ),
    log:
        log_of("report"),
    benchmark:
        benchmark_of("report")
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
        mathrl_shell("report")
