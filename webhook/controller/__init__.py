"""The GPU health controller: node health classification, taints and labels, and evictions from failed devices."""
