# rnnopt: which RNN/LSTM optimisations pay, measured. Run with `snakemake --cores all`;
# the stages, outputs and config keys are described in docs/workflow.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/scheduler.smk"
include: "workflow/rules/common.smk"
include: "workflow/rules/resources.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/verify.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/memory.smk"
include: "workflow/rules/churn.smk"
include: "workflow/rules/precision.smk"
include: "workflow/rules/autobatch.smk"
include: "workflow/rules/varlen.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


# The default target (Snakemake keeps it only from the main Snakefile, not from an include).
rule all:
    input:
        rules.report.output,
        rules.pyperf.output,
