"""`specpilot demo`: the tuning loop end to end on one machine (sandbox, simulated engines, load, live view)."""
