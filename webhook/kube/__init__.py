"""Kubernetes I/O: the API client, kubectl credentials, manifest files, leader election and the node cache."""
