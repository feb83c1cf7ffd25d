"""The tuning loop on real vLLM engines (the CPU build): the operator tunes a real deployment in the
sandbox, whose pods run their real containers, and a measured sweep over every candidate N judges it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from specpilot_harness.realvllm.run import REAL_WINDOW, real_options, report, run_real, verdict, write_json

# Where the run's JSON lands for the spread over repeated runs (docs/demo.md); a temp dir by default.
OUT = os.environ.get("SPECPILOT_E2E_OUT")


@pytest.mark.parametrize("method", ["draft_model"])
async def test_the_tuner_beats_the_default_on_real_vllm_and_the_sweep_agrees(method: str, tmp_path: Path) -> None:
    opts = real_options(method, REAL_WINDOW, tmp_path)
    result = await run_real(opts, Console(stderr=True, width=160))
    write_json(result, Path(OUT or tmp_path) / f"e2e-{method}.json")
    print(report(result))
    judged = verdict(result)
    assert result.converged, json.dumps(result.to_json(), indent=1)
    assert not any(result.swept_errors.values())
    # The tuner's final N delivers at least 95% of the best N the sweep measured, with fewer canaries
    # than candidates, and never promoted an N the sweep measured as worse than the stable it replaced.
    assert judged["share_of_best"] >= 0.95, report(result)
    assert len(result.canaries) < len(opts.candidates)
    assert not judged["worse_promotions"], report(result)
