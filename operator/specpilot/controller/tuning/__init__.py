"""The tuning daemon: the controller's I/O half of the pure tuner (specpilot.tuning). loop.py is the Kopf
daemon per tuned object; status.py turns what the cluster shows into the tuner's Observations and its answer
into status, conditions and Events; metrics.py its Prometheus series (docs/tuning-loop.md)."""
