"""The open-question experiments in the report: one module per experiment (autobatch,
varlen, cache, churn, precision, named like their commands), the rows they share (rows) and the
two report sections that gather them (batching, memory)."""
