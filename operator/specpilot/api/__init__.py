"""The SpeculativeDeployment API: models, the generated CRD, and validation.

- `models`: pydantic models of spec and status (the contract; camelCase field names).
- `crd`: the CRD generated from the models; `rules`: its CEL rules, generated from speculative.py.
- `admission`: what an API server does with a custom resource (defaults, schema, CEL), for any CRD.
- `validate`: `validate_object` / `load`, admission plus the rules CEL cannot express.
"""
