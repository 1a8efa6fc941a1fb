"""The layer maths: weights, the float64 reference, FLOP and byte counts, the
equivalence check and the variant ladder. Imports nothing else of rnnopt but errors."""
