"""The background audit of running workloads against the cluster, and the reports it writes."""
