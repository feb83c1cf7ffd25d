"""vllm_metrics: parsing real vLLM expositions into snapshots, and deltas across pod restarts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specpilot_runtime import vllm_metrics as vm

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DRAFT_MODEL_N4 = FIXTURES / "vllm-0.32-cpu-draft_model-n4.prom"
NGRAM_N3 = FIXTURES / "vllm-0.32-cpu-ngram-n3.prom"


def test_real_scrape_parses_into_counters_for_every_position() -> None:
    snap = vm.parse(DRAFT_MODEL_N4.read_text(), scrape_time=12.5)
    assert snap.drafts > 0 and snap.draft_tokens == 4 * snap.drafts
    assert len(snap.accepted_per_pos) == 4
    assert snap.accepted_tokens == sum(snap.accepted_per_pos)
    assert snap.drafted_per_pos == (snap.drafts,) * 4  # the plugin's counter, a draft model drafts all N
    assert snap.generation_tokens > 0 and snap.prompt_tokens > 0
    assert snap.tpot_count > 0 and snap.tpot_sum > 0
    assert snap.scrape_time == 12.5
    s = vm.survival(snap)
    assert all(a >= b for a, b in zip(s, s[1:]))
    assert vm.mean_acceptance_length(snap) == pytest.approx(1 + snap.accepted_tokens / snap.drafts)


def test_ngram_scrape_shows_shorter_drafts_at_later_positions() -> None:
    snap = vm.parse(NGRAM_N3.read_text())
    assert len(snap.accepted_per_pos) == 3
    assert snap.drafted_per_pos is not None
    assert snap.drafted_per_pos[0] == snap.drafts
    assert sum(snap.drafted_per_pos) == snap.draft_tokens
    assert list(snap.drafted_per_pos) == sorted(snap.drafted_per_pos, reverse=True)
    per_pos = vm.position_acceptance(snap)
    assert per_pos is not None and all(p is None or 0 <= p <= 1 for p in per_pos)


def test_created_samples_are_not_counted() -> None:
    snap = vm.parse(DRAFT_MODEL_N4.read_text())
    assert not any(k.endswith("_created") for k in snap.extra)
    assert snap.drafts < 1e6  # a _created timestamp is ~1.8e9


EXPOSITION_TWO_ENGINES = """\
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 30
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 20
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 5
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 10
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2
vllm:num_requests_running{engine="1",model_name="m"} 3
"""

# What a recording rule or an older exporter emits: no TYPE lines, no _total suffix.
EXPOSITION_BARE = """\
vllm:spec_decode_num_drafts{engine="0",model_name="m"} 40
vllm:spec_decode_num_draft_tokens{engine="0",model_name="m"} 80
vllm:spec_decode_num_accepted_tokens{engine="0",model_name="m"} 43
vllm:spec_decode_num_accepted_tokens_per_pos{engine="0",model_name="m",position="0"} 28
vllm:spec_decode_num_accepted_tokens_per_pos{engine="0",model_name="m",position="1"} 15
"""


def test_engines_are_summed() -> None:
    snap = vm.parse(EXPOSITION_TWO_ENGINES)
    assert snap.drafts == 40
    assert snap.accepted_per_pos == (28, 15)
    assert snap.running == 5
    assert snap.drafted_per_pos is None  # no plugin in this pod


def test_bare_names_read_like_total_names() -> None:
    snap = vm.parse(EXPOSITION_BARE)
    assert snap.drafts == 40 and snap.draft_tokens == 80 and snap.accepted_tokens == 43
    assert snap.accepted_per_pos == (28, 15)
    assert vm.survival(snap) == (0.7, 0.375)
    assert vm.acceptance_rate(snap) == pytest.approx(43 / 80)


def test_no_speculation_gives_empty_vectors_and_no_ratios() -> None:
    snap = vm.parse('vllm:generation_tokens_total{engine="0",model_name="m"} 7\n')
    assert snap.generation_tokens == 7 and snap.accepted_per_pos == ()
    assert vm.survival(snap) == () and vm.mean_acceptance_length(snap) is None
    assert vm.acceptance_rate(snap) is None and vm.tpot_mean(snap) is None


def test_not_an_exposition_is_refused() -> None:
    with pytest.raises(ValueError):
        vm.parse("this is { not metrics\n")


@pytest.mark.parametrize("position", ["64", "1000000000", "-1", "1e3", "٣", " 3"])
def test_a_position_label_outside_what_n_can_reach_is_refused(position: str) -> None:
    text = (f"# TYPE {vm.SPEC_ACCEPTED_PER_POS} counter\n"
            f'{vm.SPEC_ACCEPTED_PER_POS}_total{{position="{position}"}} 1\n')
    with pytest.raises(ValueError, match="is not a whole number below 64"):
        vm.parse(text)
    assert vm.parse(text.replace(f'"{position}"', '"63"')).accepted_per_pos[63] == 1.0


def _snap(drafts: float, per_pos: tuple[float, ...], running: float = 1, gen: float = 100) -> vm.Snapshot:
    return vm.Snapshot(drafts=drafts, draft_tokens=drafts * len(per_pos), accepted_tokens=sum(per_pos),
                       accepted_per_pos=per_pos, drafted_per_pos=(drafts,) * len(per_pos),
                       generation_tokens=gen, running=running, scrape_time=drafts)


def test_delta_counts_the_window_and_keeps_the_later_gauges() -> None:
    d = vm.delta(_snap(100, (80, 60), running=4, gen=500), _snap(150, (110, 80), running=2, gen=700))
    assert not d.reset
    assert (d.drafts, d.accepted_per_pos, d.drafted_per_pos) == (50, (30, 20), (50, 50))
    assert d.accepted_tokens == 50 and d.generation_tokens == 200
    assert d.running == 2 and d.scrape_time == 150


def test_delta_after_a_pod_restart_is_the_new_count_never_negative() -> None:
    before = _snap(1000, (800, 600), gen=9000)
    after_restart = _snap(20, (15, 9), gen=90)
    d = vm.delta(before, after_restart)
    assert d.reset
    assert (d.drafts, d.accepted_per_pos, d.generation_tokens) == (20, (15, 9), 90)
    fields = (d.drafts, d.draft_tokens, d.accepted_tokens, d.generation_tokens, *d.accepted_per_pos)
    assert all(v >= 0 for v in fields)


def test_one_counter_going_down_means_all_restarted() -> None:
    # Only generation_tokens shows the restart (no drafts yet since it); the spec counters must not be
    # differenced against the old pod's either.
    before = _snap(100, (80, 60), gen=5000)
    after = replace(_snap(100, (80, 60), gen=30))
    d = vm.delta(before, after)
    assert d.reset and d.drafts == 100 and d.generation_tokens == 30


def test_a_new_n_is_a_restart() -> None:
    d = vm.delta(_snap(100, (80, 60)), _snap(120, (90, 70, 50)))
    assert d.reset and d.accepted_per_pos == (90, 70, 50)


def test_plugin_counter_appearing_counts_from_zero() -> None:
    before = replace(_snap(100, (80, 60)), drafted_per_pos=None)
    d = vm.delta(before, _snap(150, (110, 80)))
    assert not d.reset and d.drafted_per_pos == (150, 150) and d.drafts == 50


def test_real_scrape_against_itself_is_an_empty_window() -> None:
    snap = vm.parse(DRAFT_MODEL_N4.read_text())
    d = vm.delta(snap, snap)
    assert not d.reset and d.drafts == 0 and set(d.accepted_per_pos) == {0}
    assert vm.survival(d) == () and vm.mean_acceptance_length(d) is None
