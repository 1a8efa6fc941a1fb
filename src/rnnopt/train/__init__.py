"""Training: datasets, task heads, optimisers, per-framework steppers and the loop."""
