"""The real-node e2e suite: the chart installed by helm on kubelet + containerd (make e2e-node)."""
