"""vramgate: VRAM-aware admission webhook, scheduler extender and GPU health controller for Kubernetes."""
