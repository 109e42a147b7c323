rule figures:
    """The report's figures, one PNG each, from the tables."""
    input:
        tables=outputs("aggregate")["tables"],
        complete=outputs("aggregate")["complete"],
    output:
        report(
            directory(outputs("figures")["figures"]),
            patterns=["{name}.png"],
            caption="../report/captions/figures.rst",
            category=get_report_section,
            subcategory="Figures",
            labels={"figure": "{name}"},
        ),
    log:
        log_of("figures"),
    benchmark:
        benchmark_of("figures")
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
        mathrl_shell("figures")
