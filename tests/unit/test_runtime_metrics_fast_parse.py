"""Parsing only the lines the snapshot uses gives the same snapshot as parsing the whole exposition, and what
is not an exposition, or a non-finite counter, still fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specpilot_runtime import vllm_metrics as vm

FIXTURES = sorted((Path(__file__).parents[1] / "fixtures").glob("vllm-*.prom"))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_the_snapshot_of_a_real_exposition_is_unchanged(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_text()
    fast = vm.parse(text, 1.0)
    monkeypatch.setattr(vm, "_read_lines", lambda t: t)
    assert fast == vm.parse(text, 1.0)
    assert fast.accepted_per_pos and fast.drafts > 0 and fast.tpot_count > 0 and fast.extra


def test_buckets_and_other_families_are_left_out() -> None:
    text = FIXTURES[0].read_text()
    kept = vm._read_lines(text)
    # Only the latency histograms' buckets stay: e2e (the automatic drain reads it), TTFT and TPOT (the SLO gates).
    buckets = {line.split("{")[0] for line in kept.splitlines() if "_bucket{" in line}
    assert buckets == {vm.E2E_LATENCY + "_bucket", vm.TTFT + "_bucket", vm.TPOT + "_bucket"} and "python_gc" not in kept
    assert len(kept.splitlines()) < len(text.splitlines()) / 2
    names = {f.name for f in text_string_to_metric_families(kept)}
    assert all(name.startswith("vllm:") for name in names)


def test_garbage_still_fails_and_a_nan_counter_is_still_refused() -> None:
    with pytest.raises(ValueError):
        vm.parse("<html>not metrics</html>")
    with pytest.raises(vm.NonFiniteSample):
        vm.parse("# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total NaN\n")


def test_finite_samples_that_sum_to_infinity_over_engines_are_refused() -> None:
    """Two engines at 1e308 sum to infinity, and a window between two such scrapes would count NaN."""
    for name, labels in (("vllm:generation_tokens_total", ""), ("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                                                                 'position="0",')):
        text = "".join(f'{name}{{{labels}engine="{e}",model_name="m"}} 1.5e308\n' for e in (0, 1))
        with pytest.raises(vm.NonFiniteSample, match="sums to infinity over engines"):
            vm.parse(text)
