"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) built
from source and run on loopback, for tests that must meet the real API server rather than the sandbox's
emulation (docs/sandbox.md)."""

from specpilot_harness.controlplane.controlplane import ControlPlane, binaries

__all__ = ["ControlPlane", "binaries"]
