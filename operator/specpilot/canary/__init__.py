"""The canary's lifecycle, apart from when to start, promote or roll back (the pure tuner, specpilot.tuning,
decides that): which N each track runs (tracks.py, from status.tuning as resume.py reads it back) and how
traffic is split between the tracks (traffic.py). The reconciler renders the tracks; render/replicas.py
sizes them per canary.mode."""
