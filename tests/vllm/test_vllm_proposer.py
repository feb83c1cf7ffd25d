"""specpilot's confidence n-gram drafter (ngram_drafter "confidence") against vLLM's own n-gram drafter, in real
vLLM (CPU build), both through `specpilot-runtime serve`.

Same tiny model, same lookup bounds, same N, the same greedy prompts one at a time: text that repeats (long
matches, where lookup pays) and text that does not (short matches). The outputs must be the same text (greedy
speculative decoding is lossless); where matches are short the confidence drafter must draft fewer tokens with
no lower acceptance per drafted token. Every number is printed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specpilot_runtime import vllm_metrics as vm

from realvllm import Server, TinyModels
from test_real_vllm import ENGINE_ARGS, PROMPTS

N = 4
LOOKUP = {"prompt_lookup_min": 2, "prompt_lookup_max": N + 1}
MAX_TOKENS = 40
# Words of the tiny models' corpus, none repeated within a prompt: lookups find only what the output repeats.
NOVEL = [
    "kalo mine rutashi pove danser quix or the ta",
    "shipo vedan serqu ixor kami neru tapo shive",
    "if print return for else def y in is a of",
    "lomi kane ruqu danta shipo or ix ve po ser",
]
KINDS = {"repetitive": PROMPTS[:4], "novel": NOVEL}
STEPS = "vllm:iteration_tokens_total_count"  # one sample per engine step


@dataclass(frozen=True)
class Run:
    """One drafter on one kind of prompt: what it generated and what vLLM's counters moved by."""

    texts: list[str]
    window: vm.Snapshot
    steps: float
    seconds: float

    @property
    def acceptance_length(self) -> float:
        """vLLM's mean acceptance length: 1 + accepted / drafts (over the steps that drafted)."""
        return 1 + self.window.accepted_tokens / self.window.drafts if self.window.drafts else 1.0

    @property
    def drafted_per_draft(self) -> float:
        return self.window.draft_tokens / self.window.drafts if self.window.drafts else 0.0

    @property
    def accepted_per_drafted(self) -> float:
        return self.window.accepted_tokens / self.window.draft_tokens if self.window.draft_tokens else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Generated tokens per engine step, the steps that drafted nothing included (one request at a time)."""
        return self.window.generation_tokens / self.steps

    def line(self) -> str:
        w = self.window
        return (f"drafts {w.drafts:.0f}, drafted {w.draft_tokens:.0f} ({self.drafted_per_draft:.2f}/draft), "
                f"accepted {w.accepted_tokens:.0f} ({self.accepted_per_drafted:.3f}/drafted), "
                f"1 + accepted/drafts {self.acceptance_length:.3f}, tokens/step {self.tokens_per_step:.3f}, "
                f"{w.generation_tokens / self.seconds:.0f} tokens/s")


def scrape(server: Server) -> tuple[vm.Snapshot, float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    steps = sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == STEPS)
    return vm.parse(text, scrape_time=time.time()), steps


def generate(server: Server, prompts: list[str]) -> Run:
    """The prompts one at a time, so every step decodes one sequence and the outputs cannot depend on batching."""
    before, steps_before = scrape(server)
    start = time.monotonic()
    texts = []
    for prompt in prompts:
        r = httpx.post(f"{server.url}/v1/completions", timeout=120, json={
            "model": server.model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        texts.append(r.json()["choices"][0]["text"])
    seconds = time.monotonic() - start
    after, steps_after = scrape(server)
    return Run(texts, vm.delta(before, after), steps_after - steps_before, seconds)


def serve_drafter(serve: Any, models: TinyModels, drafter: str) -> dict[str, Run]:
    server = serve({
        "model": str(models.target), "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS,
        "speculative": {"method": "ngram", "num_speculative_tokens": N, "extra": LOOKUP},
        "ngram_drafter": drafter,
    }, f"tiny-ngram-{drafter}")
    generate(server, NOVEL[:1])  # warm-up: the first requests run slower
    runs = {kind: generate(server, prompts) for kind, prompts in KINDS.items()}
    code, _ = server.stop()
    assert code == 0, server.log_tail()
    return runs


def test_confidence_drafter_against_vllms_ngram(serve: Any, tiny_models: TinyModels) -> None:
    ours = serve_drafter(serve, tiny_models, "confidence")
    theirs = serve_drafter(serve, tiny_models, "vllm")
    for kind in KINDS:
        print(f"{kind:10s} vLLM ngram: {theirs[kind].line()}")
        print(f"{kind:10s} confidence: {ours[kind].line()}")
    for kind in KINDS:
        assert ours[kind].texts == theirs[kind].texts, f"{kind}: greedy outputs differ"
        assert ours[kind].window.generation_tokens == theirs[kind].window.generation_tokens == \
            MAX_TOKENS * len(KINDS[kind])
        assert ours[kind].window.drafts > 0 and theirs[kind].window.drafts > 0
        # Its drafts are prefixes of vLLM's at the same K: never longer, never accepted less often per token.
        assert ours[kind].window.draft_tokens <= theirs[kind].window.draft_tokens
        assert ours[kind].accepted_per_drafted >= theirs[kind].accepted_per_drafted
    # Where matches are short, it drafts fewer tokens per draft.
    assert ours["novel"].drafted_per_draft < theirs["novel"].drafted_per_draft
