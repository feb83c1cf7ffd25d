"""The plugin's counter is `specpilot:spec_decode_num_drafted_tokens_per_pos` (`vllm:` is vLLM's); the scraper
reads the deprecated `vllm:` spelling too for one release: the real vLLM scrapes in tests/fixtures carry it."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpilot_runtime import vllm_metrics as vm

FIXTURE = Path(__file__).parent.parent / "fixtures" / "vllm-0.32-cpu-ngram-n3.prom"
(OLD, NEW), = vm.DEPRECATED_NAMES.items()


def test_the_plugins_counter_has_specpilots_prefix() -> None:
    assert vm.SPEC_DRAFTED_PER_POS == NEW == "specpilot:spec_decode_num_drafted_tokens_per_pos"
    assert OLD == "vllm:spec_decode_num_drafted_tokens_per_pos"


def test_old_and_new_names_parse_alike() -> None:
    old_text = FIXTURE.read_text()
    assert OLD in old_text and NEW not in old_text  # a real scrape of the previous plugin
    new_text = old_text.replace(OLD, NEW)
    old, new = vm.parse(old_text, 1.0), vm.parse(new_text, 1.0)
    assert old.drafted_per_pos is not None and len(old.drafted_per_pos) == 3
    assert old == new
    assert vm.position_acceptance(old) == vm.position_acceptance(new)
    # Neither name lands in `extra`, and a scrape without the plugin still has no drafted vector.
    assert not any("drafted" in k for k in old.extra)
    without = "\n".join(line for line in old_text.splitlines() if OLD not in line) + "\n"
    assert vm.parse(without).drafted_per_pos is None


def test_when_both_names_appear_the_new_one_counts() -> None:
    text = FIXTURE.read_text()
    doubled = [line.replace(OLD, NEW) for line in text.splitlines() if line.startswith(OLD) and "position" in line]
    bumped = "\n".join(line.rsplit(" ", 1)[0] + " 7.0" for line in doubled)
    snap = vm.parse(f"{text}\n{bumped}\n")
    assert snap.drafted_per_pos == (7.0, 7.0, 7.0)


def test_a_delta_across_the_rename_counts_on() -> None:
    """A scrape before the pod moved to the new plugin and one after without a restart cannot happen (the
    plugin changes only with the pod), so the same counts under either name make an empty window."""
    old_text = FIXTURE.read_text()
    window = vm.delta(vm.parse(old_text, 1.0), vm.parse(old_text.replace(OLD, NEW), 2.0))
    assert not window.reset and window.drafted_per_pos == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("name", [OLD, NEW])
def test_a_non_finite_drafted_count_is_refused_under_either_name(name: str) -> None:
    text = f'{name}_total{{model_name="m",engine="0",position="0"}} NaN\n'
    with pytest.raises(vm.NonFiniteSample):
        vm.parse(text)
