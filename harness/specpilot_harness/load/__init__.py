"""`specpilot load`: task-like traffic against one URL or a SpeculativeDeployment's Service endpoints."""
