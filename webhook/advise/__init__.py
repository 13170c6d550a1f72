"""Answers for people: the fixes that would make a workload fit, explanations per node, and the fit planner."""
