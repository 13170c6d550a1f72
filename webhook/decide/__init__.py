"""The admission hot path: a workload's demand, its placement on GPUs, the rules, the verdict and the mutation."""
