"""The guide's open questions as protocols: automatic batch size, variable-length
batching, precision along a long sequence."""
