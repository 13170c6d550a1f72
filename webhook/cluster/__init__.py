"""Where a node's GPUs and their memory come from: GPU Feature Discovery, managed-cloud labels, config."""
