"""The real-engine run's judge (harness/specpilot_harness/realvllm/run.py): how the interleaved sweep's
slices become goodput per N and a noise, what the verdict says of the tuner's path, and the files the demo
writes."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from specpilot.api.models import canary_pods
from specpilot.api.validate import load, validate_object
from specpilot_harness.realvllm.plot import sweep_plot
from specpilot_harness.realvllm.run import (REAL_METHODS, REAL_WINDOW, RealRunResult, manifest, real_options,
                                            relative_slices, sweep_manifest, sweep_noise, swept_goodput, verdict,
                                            write_json)


def result(slices: dict[int, list[float]], final_n: int, promotions: list[dict[str, int]]) -> RealRunResult:
    return RealRunResult(method="draft_model", default_n=3, candidates=sorted(slices), margin=0.02,
                         swept_tokens_per_s=swept_goodput(slices), swept_slices=slices, final_n=final_n,
                         promotions=promotions)


def test_drift_between_cycles_cancels() -> None:
    # The machine got twice as fast in the second cycle; how the N compare did not change.
    slices = {0: [300.0, 600.0], 3: [100.0, 200.0]}
    assert relative_slices(slices) == {0: [1.5, 1.5], 3: [0.5, 0.5]}
    goodput = swept_goodput(slices)
    assert goodput[0] / goodput[3] == pytest.approx(3.0)
    assert sweep_noise(result(slices, 0, [])) == pytest.approx(0.0)


def test_spread_within_cycles_is_the_noise() -> None:
    steady = {0: [300.0, 300.0, 300.0], 3: [100.0, 100.0, 100.0]}
    jumpy = {0: [300.0, 200.0, 400.0], 3: [100.0, 100.0, 100.0]}
    assert sweep_noise(result(jumpy, 0, [])) > sweep_noise(result(steady, 0, [])) + 0.1
    # Comparing two swept N is comparing two noisy means: the allowance is that of their difference.
    judged = verdict(result(jumpy, 0, []))
    assert judged["comparison_noise"] == pytest.approx(2 ** 0.5 * judged["noise"])


def test_three_cycles_widen_the_interval_as_students_t_does() -> None:
    # Three slices only guess their own spread: a 95% interval on their mean is 4.30 standard errors (t with
    # two degrees of freedom), not 2. A CI run's sweep of three cycles had put it at half that.
    slices = {0: [110.0, 100.0, 90.0], 3: [90.0, 100.0, 110.0]}
    assert sweep_noise(result(slices, 0, [])) == pytest.approx(4.30 * 0.1 / 3 ** 0.5, rel=1e-3)
    many = {0: [110.0, 90.0] * 10, 3: [90.0, 110.0] * 10}
    assert sweep_noise(result(many, 0, [])) == pytest.approx(2.0 * statistics.stdev([1.1, 0.9] * 10) / 20 ** 0.5,
                                                             rel=1e-3)


def test_verdict_scores_the_final_n_and_each_promotion_against_the_sweep() -> None:
    slices = {0: [300.0, 310.0, 290.0], 1: [200.0, 190.0, 210.0], 3: [100.0, 105.0, 95.0]}
    good = verdict(result(slices, 0, [{"from": 3, "to": 0}]))
    assert good["best_n"] == 0 and good["share_of_best"] == pytest.approx(1.0)
    assert good["default_share_of_best"] == pytest.approx(1 / 3, rel=0.05)
    assert good["worse_promotions"] == []
    bad = verdict(result(slices, 3, [{"from": 1, "to": 3}]))
    assert bad["share_of_best"] == pytest.approx(1 / 3, rel=0.05)
    assert bad["worse_promotions"] == [{"from": 1, "to": 3}]


def test_no_sweep_means_no_verdict() -> None:
    assert verdict(result({}, 3, []))["best_n"] is None


def test_the_demo_writes_the_sweep_and_the_path_as_json_and_png(tmp_path: Path) -> None:
    slices = {0: [300.0, 310.0], 1: [200.0, 190.0], 3: [100.0, 105.0]}
    run = result(slices, 0, [{"from": 3, "to": 0}])
    run.canaries = [0]
    run.path = [{"seq": 9, "round": 1, "action": "promote", "n": 0, "reason": "measured better by 90%"}]
    run.tuning_status = {"stableN": 0, "phase": "converged"}
    doc = json.loads(write_json(run, tmp_path / "out" / "demo-vllm.json").read_text())
    assert doc["swept_tokens_per_s"] == {str(n): g for n, g in swept_goodput(slices).items()}
    assert doc["canaries"] == [0] and doc["promotions"] == [{"from": 3, "to": 0}]
    assert doc["verdict"]["best_n"] == 0 and doc["tuning_status"]["stableN"] == 0
    png = sweep_plot(run, tmp_path / "out" / "demo-vllm.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize("method", REAL_METHODS)
def test_the_real_run_pairs_its_canary_at_the_load_the_sweep_measures(method: str, tmp_path: Path) -> None:
    # A replacing canary beside one stable pod: each pod serves its share of the clients while paired, and
    # the sweep loads each N's one pod with that same share. Every object the run applies is valid.
    opts = real_options(method, REAL_WINDOW, tmp_path)
    tuned = manifest(opts, "tiny", tmp_path)
    assert validate_object(tuned) == []
    sd = load(tuned)
    assert canary_pods(sd.spec.tuning.canary.mode, sd.spec.replicas, sd.spec.tuning.canary.replicas) == "replace"
    assert opts.clients_per_pod * tuned["spec"]["replicas"] == opts.concurrency
    for n in opts.candidates:
        copy = sweep_manifest(opts, f"tiny-n{n}", tmp_path, n)
        assert validate_object(copy) == [] and copy["spec"]["replicas"] == 1
