"""A hub id not in the pod's hub cache gets its config.json fetched before vLLM starts (huggingface_hub's
download, into the same cache), so a DSpark draft's block size is known and an N it cannot draft is refused
before minutes of loading; offline, cached, local, failing or hanging fetches claim nothing and stop nothing."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from specpilot_runtime import serve
from specpilot_runtime.cli import main
from specpilot_runtime.hub_config import fetch_config, wants_fetch

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DSPARK_B7 = {"architectures": ["DeepseekV3DSparkForCausalLM"], "model_type": "deepseek_v3", "block_size": 7}
DRAFT = "deepseek-ai/DeepSpec-DSpark"


class FakeHub:
    """hf_hub_download as far as the cache goes: refs/main -> snapshots/<commit>/config.json."""

    def __init__(self, configs: dict[str, dict[str, Any]]) -> None:
        self.configs, self.calls = configs, []

    def __call__(self, *, repo_id: str, filename: str, revision: str | None, cache_dir: str,
                 token: str | None) -> str:
        self.calls.append((repo_id, filename, revision, cache_dir, token))
        if repo_id not in self.configs:
            raise RuntimeError(f"404 Client Error: Repository Not Found for url: .../{repo_id}")
        root = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / (revision or "main")).write_text(COMMIT)
        (root / "snapshots" / COMMIT).mkdir(parents=True, exist_ok=True)
        path = root / "snapshots" / COMMIT / filename
        path.write_text(json.dumps(self.configs[repo_id]))
        return str(path)


def test_an_uncached_dspark_draft_is_fetched_and_an_n_past_its_block_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    hub = FakeHub({DRAFT: DSPARK_B7, "Qwen/Qwen3-8B": {"model_type": "qwen3"}})
    monkeypatch.setattr("specpilot_runtime.hub_config._hf_hub_download", lambda: hub)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    config = tmp_path / "engine.json"
    config.write_text(json.dumps({"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "cpu"},
                                  "speculative": {"method": "dspark", "model": DRAFT, "num_speculative_tokens": 16}}))
    cfg, problems = serve.load(config, fetch=True)
    assert [str(p) for p in problems][0].startswith(
        "speculative.numSpeculativeTokens: 16 is too large for this dspark draft (block size 7")
    assert {(c[0], c[1], c[3], c[4]) for c in hub.calls} == {
        (DRAFT, "config.json", str(tmp_path / "hub"), "hf_secret"),
        ("Qwen/Qwen3-8B", "config.json", str(tmp_path / "hub"), "hf_secret")}
    # Now cached: nothing is fetched again.
    hub.calls.clear()
    assert not wants_fetch(DRAFT, {"HF_HOME": str(tmp_path)}, None)
    # A dry run fetches nothing (and so cannot know the block size of a checkpoint never cached).
    other = tmp_path / "other"
    monkeypatch.setenv("HF_HOME", str(other))
    assert main(["serve", "--config", str(config), "--dry-run"]) == 0 and hub.calls == []
    capsys.readouterr()


def test_offline_local_or_cached_checkpoints_are_not_fetched(tmp_path: Path) -> None:
    env = {"HF_HOME": str(tmp_path)}
    assert wants_fetch(DRAFT, env, None)
    assert not wants_fetch(DRAFT, {**env, "HF_HUB_OFFLINE": "1"}, None)
    assert not wants_fetch(str(tmp_path), env, None)  # a local directory
    assert not wants_fetch("../../etc", env, None) and not wants_fetch("a--b", env, None)  # no hub id
    hub = FakeHub({})
    assert fetch_config(DRAFT, {**env, "HF_HUB_OFFLINE": "true"}, download=hub) is False and hub.calls == []


def test_a_failing_or_hanging_fetch_claims_nothing_and_returns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    env = {"HF_HOME": str(tmp_path)}
    assert fetch_config(DRAFT, env, download=FakeHub({})) is False  # 404: vLLM says so itself, later
    assert "not fetched (404 Client Error" in caplog.text
    release = threading.Event()

    def hang(**_: Any) -> str:
        release.wait(10)
        return ""
    assert fetch_config(DRAFT, env, download=hang, timeout_s=0.2) is False
    release.set()
    assert "not fetched within 0 s" in caplog.text
