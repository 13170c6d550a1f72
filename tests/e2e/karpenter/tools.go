//go:build tools

// Package tools pins the Karpenter module whose KWOK provider the autoscaling e2e runs
// (sigs.k8s.io/karpenter/kwok: Karpenter's controllers with a cloud provider that creates
// Node objects for KWOK to run).
package tools

import _ "sigs.k8s.io/karpenter/kwok"
