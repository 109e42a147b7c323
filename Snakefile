# mathrl: tiny GPTs learn arithmetic with a supervised warm-up, then RL; grids of runs
# reproduce the documents' training-stability studies (docs/ARCHITECTURE.md).
#
#   snakemake --cores 8 report                       the default, CPU-sized pipeline
#   snakemake report --cores 8 --configfile config/full.yaml --resources gpu=4
#   snakemake --profile profiles/slurm report        the same on a SLURM cluster
#   snakemake --cores 4 runs                         every RL run and bandit study, no report
#   snakemake --cores 2 warmup                       the warm-up checkpoints only
#   snakemake --cores 2 experiment_batch             the runs of one experiment
#
# Every rule calls one `mathrl` subcommand with the config Snakemake has (rules/common.smk);
# logs and benchmarks go to <results>/logs and <results>/benchmarks/<rule>/.


configfile: "config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"


localrules:
    aggregate,
    figures,
    report,


rule all:
    input:
        outputs("report")["report"],
        outputs("aggregate")["complete"],


rule runs:
    input:
        get_runs_targets,


rule warmup:
    input:
        warmup_models(),


# `snakemake experiment_NAME`: the runs of one experiment (and the warm-ups they start from).
for _name in CFG["experiments"]:

    rule:
        name:
            f"experiment_{_name}"
        input:
            experiment_outputs(_name),


include: "rules/problems.smk"
include: "rules/sft.smk"
include: "rules/train.smk"
include: "rules/bandit.smk"
include: "rules/gradvar.smk"
include: "rules/aggregate.smk"
include: "rules/figures.smk"
include: "rules/report.smk"
