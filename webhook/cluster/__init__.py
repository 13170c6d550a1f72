"""What nodes offer and hold: GPU inventory per node, the snapshot, GPU usage, DRA devices, cloud GPU tables."""
