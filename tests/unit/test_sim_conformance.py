"""The simulated engine's /metrics against a real vLLM 0.32 CPU scrape (tests/fixtures/vllm-0.32-cpu-*.prom).

For every family the simulator exports: the real vLLM exports it too, with the same type, HELP text,
sample suffixes, label names, histogram buckets and draft positions. And the simulator exports every
family specpilot reads from vLLM (vllm_metrics) that the real scrape has.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specpilot_runtime import vllm_metrics as vm
from specpilot_harness.sim.profile import read_profile
from specpilot_harness.sim.server import SimConfig, SimServer

FIXTURES = sorted((Path(__file__).parent.parent / "fixtures").glob("vllm-0.32-cpu-*.prom"))

# Names specpilot reads from a serving pod: vLLM's own and its plugin's drafted-per-position counter.
READ_BY_SPECPILOT = {
    vm.SPEC_DRAFTED_PER_POS, vm.SPEC_DRAFTS, vm.SPEC_DRAFT_TOKENS, vm.SPEC_ACCEPTED_TOKENS, vm.SPEC_ACCEPTED_PER_POS,
    vm.GENERATION_TOKENS, vm.PROMPT_TOKENS, vm.TPOT, vm.INTER_TOKEN_LATENCY, vm.TTFT, vm.E2E_LATENCY,
    vm.RUNNING, vm.WAITING, vm.KV_CACHE_USAGE, vm.ITERATION_TOKENS, vm.PREEMPTIONS,
}


def _renamed(name: str) -> str:
    """A family or sample name under its new name: the real scrapes are of the plugin before the rename."""
    for old, new in vm.DEPRECATED_NAMES.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name


def surface(text: str) -> dict[str, dict[str, object]]:
    """Family name -> its type, HELP, and per sample suffix the label names (and `le`/position values)."""
    out: dict[str, dict[str, object]] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(vm.PREFIXES):
            continue
        samples: dict[str, frozenset[str]] = {}
        buckets: set[str] = set()
        positions: set[str] = set()
        for s in fam.samples:
            samples[_renamed(s.name)] = frozenset(s.labels)
            if "le" in s.labels:
                buckets.add(s.labels["le"])
            if vm.LABEL_POSITION in s.labels:
                positions.add(s.labels[vm.LABEL_POSITION])
        out[_renamed(fam.name)] = {"type": fam.type, "help": fam.documentation, "samples": samples,
                         "buckets": buckets, "positions": positions}
    return out


@pytest.fixture(params=FIXTURES, ids=[f.name for f in FIXTURES])
def real_scrape(request: pytest.FixtureRequest) -> str:
    return request.param.read_text(encoding="utf-8")


def test_a_real_vllm_scrape_is_present() -> None:
    assert FIXTURES, "tests/fixtures/vllm-0.32-cpu-*.prom (a real vLLM scrape) is missing"


async def sim_scrape(num_speculative_tokens: int) -> str:
    profile = read_profile(None, "example-dflash-parallel")
    config = SimConfig(profile=profile, num_speculative_tokens=num_speculative_tokens,
                       served_model_name="tiny", method=profile.method, port=0)
    async with SimServer(config) as sim, httpx.AsyncClient() as client:
        r = await client.get(f"{sim.url}/metrics")
        assert r.headers["content-type"].startswith("text/plain")
        return r.text


async def test_sim_metric_families_match_real_vllm(real_scrape: str) -> None:
    real = surface(real_scrape)
    n = len(real[vm.SPEC_ACCEPTED_PER_POS]["positions"])  # type: ignore[arg-type]
    sim = surface(await sim_scrape(n))
    assert len(sim[vm.SPEC_ACCEPTED_PER_POS]["positions"]) == n  # type: ignore[arg-type]

    assert set(sim) <= set(real), f"simulator exports families vLLM does not: {set(sim) - set(real)}"
    for name, fam in sim.items():
        assert fam == real[name], f"{name}: simulator {fam} != vLLM {real[name]}"
    missing = {f for f in READ_BY_SPECPILOT if f in real} - set(sim)
    assert not missing, f"simulator lacks families specpilot reads: {missing}"


async def test_speculation_off_exports_no_spec_decode_families() -> None:
    sim = surface(await sim_scrape(0))
    assert not [f for f in sim if f.startswith("vllm:spec_decode")]
    assert vm.GENERATION_TOKENS in sim
