"""The report: tidy tables of every record (aggregate), the optimisation comparison with its
verdicts, the variant, memory and check tables, the experiments' rows and the figures
(`rnnopt.report.build.build`). Reads records only: no torch, no variant implementation."""
