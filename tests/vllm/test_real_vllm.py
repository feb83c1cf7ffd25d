"""Real vLLM (CPU build) with speculative decoding, launched through `specpilot-runtime serve`."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from specpilot.api.names import N_LABEL, PORT_NAME, TRACK_LABEL
from specpilot.scrape import pods
from specpilot.scrape.pods import PodScrape, ScrapeLimits
from specpilot_runtime import vllm_metrics as vm
from specpilot_runtime.checkpoint import check_checkpoints
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.speculative import VLLM_SPECULATIVE_KEYS

from realvllm import Server, TinyModels, VllmVenv, run_in_vllm_venv

ENGINE_ARGS = ["--enforce-eager", "--max-model-len", "512", "--max-num-seqs", "8"]
# Repetition gives ngram lookups something to match; the tiny random model also loops on its own.
PROMPTS = [
    "ka lo mi ka lo mi ka lo mi ka lo mi ka lo",
    "for x in y : print x for x in y : print x for x in y :",
    "the ser of the ser of the ser of the ser of the",
    "def ta ( x ) : return x + 1 def ta ( x ) : return x + 1 def",
    "ru ta shi po ve ru ta shi po ve ru ta shi",
    "a b c a b c a b c a b c a b c a",
]


def complete_all(server: Server, max_tokens: int = 48) -> list[dict[str, Any]]:
    def one(prompt: str) -> dict[str, Any]:
        r = httpx.post(f"{server.url}/v1/completions", timeout=120, json={
            "model": server.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True})
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(max_workers=3) as pool:
        return list(pool.map(one, PROMPTS))


def scrape(server: Server) -> vm.Snapshot:
    r = httpx.get(f"{server.url}/metrics", timeout=10)
    assert r.status_code == 200
    return vm.parse(r.text, scrape_time=time.time())


def assert_speculation_counted(snap: vm.Snapshot, n: int) -> None:
    assert snap.drafts > 0, "no drafts counted"
    assert len(snap.accepted_per_pos) == n, f"positions {snap.accepted_per_pos} for N={n}"
    s = vm.survival(snap)
    assert all(a >= b for a, b in zip(s, s[1:])), f"survival increases with position: {s}"
    mal = vm.mean_acceptance_length(snap)
    assert mal is not None and 1 < mal <= n + 1, f"mean acceptance length {mal} outside (1, {n + 1}]"
    assert snap.accepted_tokens == sum(snap.accepted_per_pos)
    # The plugin's counter, delivered next to vLLM's own.
    assert snap.drafted_per_pos is not None, "drafted-per-position counter missing from /metrics"
    assert len(snap.drafted_per_pos) == n
    assert all(d >= a for d, a in zip(snap.drafted_per_pos, snap.accepted_per_pos)), \
        f"drafted {snap.drafted_per_pos} below accepted {snap.accepted_per_pos}"
    # Every draft has a first token, and the positions add up to vLLM's own draft-token count.
    assert snap.drafted_per_pos[0] == snap.drafts
    assert sum(snap.drafted_per_pos) == snap.draft_tokens


def exercise(server: Server, n: int) -> tuple[vm.Snapshot, vm.Snapshot]:
    """Two rounds of requests; asserts on the cumulative snapshot and on the window between them."""
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
    for out in complete_all(server):
        assert out["choices"][0]["text"], "empty completion"
        assert out["usage"]["completion_tokens"] == 48
    first = scrape(server)
    assert_speculation_counted(first, n)
    complete_all(server)
    second = scrape(server)
    window = vm.delta(first, second)
    assert not window.reset
    assert_speculation_counted(window, n)
    assert window.generation_tokens == 48 * len(PROMPTS)
    print(f"{server.model}: {second.drafts:.0f} drafts, survival "
          f"{[round(x, 3) for x in vm.survival(second)]}, mean acceptance length "
          f"{vm.mean_acceptance_length(second):.3f}, accepted/drafted per position "
          f"{[None if x is None else round(x, 3) for x in vm.position_acceptance(second) or ()]}")
    return second, window


def stop_cleanly(server: Server) -> None:
    code, took = server.stop()
    assert code == 0, f"vLLM exited with {code} after SIGTERM:\n{server.log_tail()}"
    print(f"{server.model}: clean shutdown in {took:.1f} s")


def test_ngram_n3(serve: Any, tiny_models: TinyModels) -> None:
    server = serve({
        "model": str(tiny_models.target), "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS,
        "speculative": {"method": "ngram", "num_speculative_tokens": 3,
                        "extra": {"prompt_lookup_min": 2, "prompt_lookup_max": 4}},
    }, "tiny-ngram")
    total, _ = exercise(server, 3)
    # ngram drafts stop where the lookup runs out: later positions are drafted less often, which is
    # exactly what the plugin's counter is for.
    assert total.drafted_per_pos is not None
    assert list(total.drafted_per_pos) == sorted(total.drafted_per_pos, reverse=True)
    stop_cleanly(server)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_listening_on_every_address_serves_ipv4_and_ipv6(serve: Any, tiny_models: TinyModels) -> None:
    """`--serving-listen-address ::` (IPv6 clusters): real vLLM takes "::" as --host, and one dual-stack
    socket answers at the pod's IPv6 address, where the kubelet probes and the operator scrapes, and at
    IPv4 too; the operator's scrape of a pod at an IPv6 address reads its counters."""
    server = serve({"model": str(tiny_models.target), "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS},
                   "tiny-dual-stack", host="::")
    port = int(server.url.rsplit(":", 1)[1])
    assert httpx.get(f"http://[::1]:{port}/health", timeout=5).status_code == 200
    complete_all(server)
    pod = {"metadata": {"name": "tiny", "uid": "u", "labels": {TRACK_LABEL: "stable", N_LABEL: "0"}},
           "spec": {"containers": [{"ports": [{"name": PORT_NAME, "containerPort": port}]}]},
           "status": {"podIP": "::1", "conditions": [{"type": "Ready", "status": "True"}]}}

    async def scrape_pod() -> list[PodScrape]:
        async with pods.client(ScrapeLimits()) as client:
            return await pods.scrape_pods(client, pods.pod_targets([pod]))
    (got,) = asyncio.run(scrape_pod())
    assert got.target.url == f"http://[::1]:{port}/metrics"
    assert got.snapshot is not None, got.error
    stop_cleanly(server)


def test_draft_model_n4_noisy_draft(serve: Any, tiny_models: TinyModels) -> None:
    server = serve({
        "model": str(tiny_models.target), "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS,
        "speculative": {"method": "draft_model", "model": str(tiny_models.draft), "num_speculative_tokens": 4},
    }, "tiny-draft")
    total, _ = exercise(server, 4)
    # A draft model always drafts all N tokens; the noisy copy agrees often but not always.
    assert total.drafted_per_pos == (total.drafts,) * 4
    rate = vm.acceptance_rate(total)
    assert rate is not None and 0.1 < rate < 0.99, f"acceptance rate {rate} of a 5%-noise draft"
    stop_cleanly(server)


def test_a_schedule_drafts_k_by_the_running_batch_size(serve: Any, tiny_models: TinyModels) -> None:
    # What the simulated engine and the tuner take from vLLM's schedule: a track started at N=4 drafts the
    # K of the running batch size's range, here 4 alone and 1 beside other sequences, and the plugin's
    # counter shows which positions each step drafted.
    server = serve({
        "model": str(tiny_models.target), "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS,
        "speculative": {"method": "draft_model", "model": str(tiny_models.draft), "num_speculative_tokens": 4,
                        "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 256, 1]]},
    }, "tiny-draft-schedule")
    start = scrape(server)
    for prompt in PROMPTS[:2]:  # one at a time: every step runs one sequence
        r = httpx.post(f"{server.url}/v1/completions", timeout=120, json={
            "model": server.model, "prompt": prompt, "max_tokens": 48, "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
    alone = scrape(server)
    one = vm.delta(start, alone)
    assert one.drafts > 0 and one.drafted_per_pos == (one.drafts,) * 4, one
    # Three at once: steps run one, two or three sequences. How many overlap depends on how busy the machine
    # is (on two loaded cores 69 of 116 ran alone; on an idle CI machine once all 95), so three at once again,
    # with longer answers, until some steps did, four times at most.
    for _ in range(4):
        complete_all(server, max_tokens=96)
        together = vm.delta(alone, scrape(server))
        assert together.drafted_per_pos is not None and together.drafted_per_pos[0] == together.drafts
        if together.drafted_per_pos[1] < together.drafts:
            break
    # Every step that ran beside another drafted position 1 only, and some did.
    deep = together.drafted_per_pos[1:]
    assert len(set(deep)) == 1 and deep[0] < together.drafts, together
    assert all(a <= d for a, d in zip(together.accepted_per_pos, together.drafted_per_pos)), together
    print(f"schedule 1:4 2+:1 - alone {one.drafted_per_pos}, three at once {together.drafted_per_pos}")
    stop_cleanly(server)


def test_the_dry_run_prints_what_would_start_vllm_in_the_vllm_environment(
        vllm_venv: VllmVenv, vllm_env: dict[str, str], tiny_models: TinyModels, workdir: Any) -> None:
    """serve --dry-run, installed beside vLLM, validates the config, reads the checkpoints and prints vLLM's
    argv, the speculative config as vLLM parses it. Its time is `make bench`'s (`specpilot bench runtime`)."""
    config = workdir / "overhead.engine.json"
    config.write_text(json.dumps({
        "model": str(tiny_models.target), "accelerator": {"vendor": "cpu"},
        "speculative": {"method": "draft_model", "model": str(tiny_models.draft), "num_speculative_tokens": 4}}))
    done = subprocess.run([str(vllm_venv.runtime), "serve", "--config", str(config), "--dry-run"],
                          check=True, env=vllm_env, capture_output=True, text=True)
    argv = json.loads(done.stdout)["argv"]
    assert Path(argv[0]).name == "vllm" and argv[1:3] == ["serve", str(tiny_models.target)], argv
    speculative = json.loads(argv[argv.index("--speculative-config") + 1])
    assert speculative == {"method": "draft_model", "model": str(tiny_models.draft), "num_speculative_tokens": 4}


def _engine(model: str, speculative: dict[str, Any]) -> dict[str, Any]:
    return {"model": model, "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS, "speculative": speculative}


@pytest.fixture(scope="session")
def head_checkpoints(tiny_models: TinyModels) -> dict[str, Path]:
    """Config-only EAGLE-3 and DFlash (block size 8) heads shaped for the tiny target: enough for vLLM to
    build its config, which reads config.json but loads no weights."""
    target = json.loads((tiny_models.target / "config.json").read_text())
    heads = {
        "eagle3": {**target, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
                   "draft_vocab_size": target["vocab_size"]},
        "dflash": {**target, "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "num_hidden_layers": 1,
                   "dflash_config": {"block_size": 8, "mask_token_id": 3, "target_layer_ids": [0, 1]}},
    }
    out = {}
    for name, config in heads.items():
        path = tiny_models.target.parent / f"{name}-head"
        path.mkdir(exist_ok=True)
        (path / "config.json").write_text(json.dumps(config))
        out[name] = path
    return out


def our_configs(models: TinyModels, heads: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Every shape of speculative config specpilot renders for methods that need no GPU or download
    (dspark needs vLLM's GPU model runner; mtp needs a target with MTP layers)."""
    target, draft = str(models.target), str(models.draft)
    eagle3, dflash = str(heads["eagle3"]), str(heads["dflash"])
    schedule = [[1, 4, 4], [5, 16, 2], [17, 256, 0]]
    cases = {
        "off": {"method": "off"},
        "ngram-n1": {"method": "ngram", "num_speculative_tokens": 1},
        "ngram-n3-lookup": {"method": "ngram", "num_speculative_tokens": 3,
                            "extra": {"prompt_lookup_min": 2, "prompt_lookup_max": 4}},
        "ngram-n4-lookup-max-only": {"method": "ngram", "num_speculative_tokens": 4,
                                     "extra": {"prompt_lookup_max": 3}},
        "ngram-n4-schedule": {"method": "ngram", "num_speculative_tokens": 4,
                              "num_speculative_tokens_per_batch_size": schedule},
        "draft-n1": {"method": "draft_model", "model": draft, "num_speculative_tokens": 1},
        "draft-n4": {"method": "draft_model", "model": draft, "num_speculative_tokens": 4},
        "draft-n4-schedule": {"method": "draft_model", "model": draft, "num_speculative_tokens": 4,
                              "num_speculative_tokens_per_batch_size": schedule},
        "draft-n4-synthetic": {"method": "draft_model", "model": draft, "num_speculative_tokens": 4,
                               "extra": {"rejection_sample_method": "synthetic",
                                         "synthetic_acceptance_rates": [0.8, 0.6, 0.4, 0.2]}},
        "draft-n3-probabilistic-tp1": {"method": "draft_model", "model": draft, "num_speculative_tokens": 3,
                                       "extra": {"draft_sample_method": "probabilistic",
                                                 "draft_tensor_parallel_size": 1}},
        "draft-n8": {"method": "draft_model", "model": draft, "num_speculative_tokens": 8},
        "eagle3-n1": {"method": "eagle3", "model": eagle3, "num_speculative_tokens": 1},
        "eagle3-n5-schedule": {"method": "eagle3", "model": eagle3, "num_speculative_tokens": 5,
                               "num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 64, 2]]},
        "dflash-n7-block8": {"method": "dflash", "model": dflash, "num_speculative_tokens": 7, "block_size": 8},
        "dflash-n3": {"method": "dflash", "model": dflash, "num_speculative_tokens": 3},
    }
    return {name: _engine(target, spec) for name, spec in cases.items()}


def test_vllm_accepts_every_config_we_render(vllm_venv: VllmVenv, vllm_env: dict[str, str],
                                            tiny_models: TinyModels, head_checkpoints: dict[str, Path]) -> None:
    configs = our_configs(tiny_models, head_checkpoints)
    for name, engine in configs.items():
        cfg = EngineConfig.model_validate(engine)
        assert cfg.problems() == [] and check_checkpoints(cfg.model, cfg.speculative) == [], name
    # Configs both sides must refuse: a key from the docs that vLLM does not have, and MTP on a target
    # without MTP layers (specpilot from the target's config.json, vLLM when it builds the drafter).
    refused = {
        "invented-key": _engine(str(tiny_models.target), {"method": "ngram", "num_speculative_tokens": 3,
                                                          "extra": {"enable_adaptive_k": True}}),
        "mtp-on-llama": _engine(str(tiny_models.target), {"method": "mtp", "num_speculative_tokens": 1}),
    }
    for name, engine in refused.items():
        cfg = EngineConfig.model_validate(engine)
        assert cfg.problems() + check_checkpoints(cfg.model, cfg.speculative), name
    cases = [{"name": n, "engine": e} for n, e in (configs | refused).items()]
    verdicts = {v["name"]: v for v in json.loads(
        run_in_vllm_venv(vllm_venv, vllm_env, "vllm_accepts.py", json.dumps(cases)).splitlines()[-1])}
    for name, engine in configs.items():
        v = verdicts[name]
        assert v["ok"], f"vLLM refused {name}: {v['error']}"
        spec = engine["speculative"]
        if spec["method"] == "off":
            assert v["method"] is None
            continue
        assert v["vllm_class"] == "vllm.config.speculative.SpeculativeConfig"
        assert (v["method"], v["num_speculative_tokens"]) == (spec["method"], spec["num_speculative_tokens"])
        schedule = spec.get("num_speculative_tokens_per_batch_size")
        assert v["schedule"] == schedule, f"{name}: vLLM read schedule {v['schedule']}"
    assert not verdicts["invented-key"]["ok"] and "enable_adaptive_k" in verdicts["invented-key"]["error"]
    assert not verdicts["mtp-on-llama"]["ok"] and "mtp" in verdicts["mtp-on-llama"]["error"]


# Keys speculative.py knows from vLLM 0.33 that the 0.32 CPU build does not have yet.
NEWER_THAN_032 = {"disable_lookahead_block_hashes", "draft_lm_head_quantization", "fly_entropy_threshold",
                  "fly_entropy_top_k", "fly_window_size", "xpress_topc"}
# Fields of vLLM's class that are not user keys: vLLM fills them, or refuses them with a pointer.
NOT_USER_KEYS = {"draft_model_config", "draft_parallel_config", "target_model_config",
                 "target_parallel_config", "tensor_parallel_size"}


def test_speculative_keys_match_installed_vllm(vllm_venv: VllmVenv, vllm_env: dict[str, str]) -> None:
    code = ("import dataclasses, json; from vllm.config import SpeculativeConfig as S; "
            "print(json.dumps(sorted(f.name for f in dataclasses.fields(S) if f.init)))")
    out = subprocess.run([str(vllm_venv.python), "-c", code], check=True, env=vllm_env,
                         capture_output=True, text=True).stdout
    installed = set(json.loads(out.splitlines()[-1])) - NOT_USER_KEYS
    assert installed - VLLM_SPECULATIVE_KEYS == set(), "vLLM has keys speculative.py does not know"
    assert VLLM_SPECULATIVE_KEYS - installed == NEWER_THAN_032


pytestmark = pytest.mark.timeout(420)
