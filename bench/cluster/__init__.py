"""Scale inside the real control plane: a KWOK fleet, kube-scheduler with and without the extender,
and API-server create latency with and without the webhooks (``make bench-cluster``)."""
