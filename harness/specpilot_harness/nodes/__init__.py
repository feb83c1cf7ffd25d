"""Fake GPU nodes, and the kubelet's part for the pods bound to them, on a real control plane (agent.py)."""
