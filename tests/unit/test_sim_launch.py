"""A pod's engine.json becomes the simulated engine the sandbox runs for it, in-process or as a process."""

from __future__ import annotations

import pytest

from specpilot_runtime.cli import build_parser
from specpilot_runtime.engine_config import EngineConfig
from specpilot_harness.sim.command import config_from_args
from specpilot_harness.sim.launch import pod_seed, sim_config, simulate_argv
from specpilot_harness.sim.profile import ProfileError, read_profile
from specpilot_runtime.speculative import SpeculativeConfig

PROFILE = read_profile(None, "example-mtp-sequential")


def engine(n: int = 3, method: str = "mtp", **kw: object) -> EngineConfig:
    return EngineConfig(model="Qwen/Qwen3.5-27B", port=8000,
                        speculative=SpeculativeConfig(method=method, num_speculative_tokens=n), **kw)


@pytest.mark.parametrize("cfg", [engine(), engine(served_model_name="chat", drafted_per_position_metric=False),
                                 engine(0, "off")], ids=["mtp", "named-no-plugin", "off"])
def test_process_and_in_process_launches_serve_the_same_engine(cfg: EngineConfig) -> None:
    seed = pod_seed("chat-7d9f-abcde")
    in_process = sim_config(cfg, PROFILE, "127.1.1.2", time_scale=20.0, seed=seed)
    argv = simulate_argv(cfg, "bundled.json", PROFILE.name, "127.1.1.2", time_scale=20.0, seed=seed)
    args = build_parser().parse_args(argv[argv.index("simulate"):])
    args.profile = None  # the bundled file stands in for the runner's profiles file
    assert config_from_args(args) == in_process
    assert in_process.served_model_name == (cfg.served_model_name or "Qwen/Qwen3.5-27B")
    assert (in_process.port, in_process.num_speculative_tokens) == (8000, cfg.speculative.num_speculative_tokens)


def test_an_n_beyond_the_profile_fails_the_pod_with_a_reason() -> None:
    with pytest.raises(ProfileError, match="outside 0..max_n"):
        sim_config(engine(9), PROFILE, "127.1.1.2")


def test_replicas_get_different_stable_seeds() -> None:
    assert pod_seed("chat-a") == pod_seed("chat-a") != pod_seed("chat-b")
