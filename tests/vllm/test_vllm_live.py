"""Draft length set live in real vLLM (CPU build): live.json changes K in the running engine, no restart.

One engine (ngram, N=4, started with the table [[1, 256, 4]]) follows a live.json that the test rewrites:
K=1, a refused file, K=3, then two arms alternating. vLLM's own per-position counters say which K each phase
drafted, specpilot's say which arm each step counted under and what is in force.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specpilot_runtime import live
from specpilot_runtime import vllm_metrics as vm

from realvllm import Server, TinyModels
from test_real_vllm import ENGINE_ARGS, complete_all

N = 4
MAX_TOKENS = 32
# The engine polls live.json and writes its state every second; allow a loaded two-core machine some slack.
FOLLOW_TIMEOUT_S = 20.0


def metrics_text(server: Server) -> str:
    r = httpx.get(f"{server.url}/metrics", timeout=10)
    assert r.status_code == 200
    return r.text


def live_values(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """specpilot's live series: (sample name, labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(metrics_text(server)) if fam.name.startswith("specpilot:live")
            for s in fam.samples}


def k_in_force(server: Server) -> float | None:
    return live_values(server).get((live.LIVE_K, ((live.LABEL_BAND, "1-1"),)))


def rejected(server: Server) -> float:
    return live_values(server).get((f"{live.LIVE_REJECTED}_total", ()), 0.0)


def wait_for(what: str, check: Any, server: Server) -> None:
    deadline = time.monotonic() + FOLLOW_TIMEOUT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen within {FOLLOW_TIMEOUT_S:.0f} s:\n{server.log_tail(20)}")
        time.sleep(0.3)


def write_live(path: Path, doc: object) -> None:
    """As the kubelet updates a ConfigMap volume: the new file renamed over the old one."""
    tmp = path.with_name(".live.json.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def vllm_child(server: Server) -> int:
    """The PID of vLLM, the runtime's one child."""
    (child,) = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children").read_text().split()
    return int(child)


def phase(server: Server, before: vm.Snapshot) -> tuple[vm.Snapshot, vm.Snapshot]:
    """One round of requests (every one must succeed); the counters it moved."""
    for out in complete_all(server, max_tokens=MAX_TOKENS):
        assert out["usage"]["completion_tokens"] == MAX_TOKENS
    after = vm.parse(metrics_text(server), scrape_time=time.time())
    return after, vm.delta(before, after)


def per_arm(window: vm.Snapshot, counter: int, arms: tuple[live.Arm, ...]) -> dict[str, float]:
    """One of live.BAND_COUNTERS (by index), summed over the bands of each arm."""
    return {a.key: sum(v[counter] for (arm, _band), v in window.switchback.items() if arm == a.key) for a in arms}


def drafted_only_up_to(window: vm.Snapshot, k: int) -> None:
    """No draft and no acceptance beyond position k, and some at position k (vLLM's own counters for the
    accepted, the runtime's plugin for the drafted)."""
    assert window.drafted_per_pos is not None
    assert all(x == 0 for x in window.accepted_per_pos[k:]), window.accepted_per_pos
    assert all(x == 0 for x in window.drafted_per_pos[k:]), window.drafted_per_pos
    assert window.drafted_per_pos[k - 1] > 0, window.drafted_per_pos


def test_draft_length_follows_live_json_without_a_restart(serve: Any, tiny_models: TinyModels,
                                                          workdir: Path) -> None:
    live_dir = workdir / "live"
    live_dir.mkdir()
    live_file = live_dir / live.LIVE_FILE
    server = serve({
        "model": str(tiny_models.target), "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS,
        "speculative": {"method": "ngram", "num_speculative_tokens": N,
                        "num_speculative_tokens_per_batch_size": [[1, 256, N]],
                        "extra": {"prompt_lookup_min": 2, "prompt_lookup_max": 4}},
        "live_file": str(live_file),
    }, "tiny-ngram-live")
    pid = vllm_child(server)
    counts: dict[str, Any] = {}

    # No live.json yet: the started table, reported as in force.
    wait_for("K 4 in force", lambda: k_in_force(server) == N, server)
    snap, window = phase(server, vm.parse(metrics_text(server)))
    counts["K=4 (started)"] = window
    assert window.drafted_per_pos is not None and window.drafted_per_pos[N - 1] > 0

    write_live(live_file, {"arms": [[[1, 256, 1]]]})
    wait_for("K 1 in force", lambda: k_in_force(server) == 1, server)
    snap, window = phase(server, snap)
    counts["K=1"] = window
    drafted_only_up_to(window, 1)

    # K above the started N: refused, counted, and K 1 kept.
    write_live(live_file, {"arms": [[[1, 256, N + 1]]]})
    wait_for("the refusal counted", lambda: rejected(server) == 1, server)
    assert k_in_force(server) == 1
    assert "arms[0][0][2]" in server.log.read_text(errors="replace")

    write_live(live_file, {"arms": [[[1, 256, 3]]]})
    wait_for("K 3 in force", lambda: k_in_force(server) == 3, server)
    snap, window = phase(server, snap)
    counts["K=3"] = window
    drafted_only_up_to(window, 3)

    # Switchback: two arms, short dwells, and long enough a phase for both to be served.
    one, three = live.Arm.uniform(1, 256), live.Arm.uniform(3, 256)
    write_live(live_file, {"arms": [[list(r) for r in one.table], [list(r) for r in three.table]],
                           "dwellSeconds": [0.5, 1.0], "seed": 7})
    wait_for("both arms listed", lambda: all(
        (live.LIVE_ARM_ACTIVE, ((live.LABEL_ARM, a.key),)) in live_values(server) for a in (one, three)), server)
    # Each round of requests takes a fraction of a second here, an arm's dwell up to a second. An arm's steps
    # may all be prefills or n-gram misses (no draft), so go on until each arm has drafted and a 3-token draft
    # was seen (a few rounds; twenty at most).
    start = snap
    drafted = live.BAND_COUNTERS.index(live.SB_DRAFT_TOKENS)
    for _ in range(20):
        snap, _window = phase(server, snap)
        window = vm.delta(start, snap)
        steps, drafts = per_arm(window, 0, (one, three)), per_arm(window, drafted, (one, three))
        assert window.drafted_per_pos is not None
        if all(drafts.values()) and window.drafted_per_pos[2] > 0:
            break
    assert all(drafts.values()), f"tokens drafted per arm in the switchback phase: {drafts} (steps {steps})"
    # Each arm drafted its own K: some steps drafted 3 tokens a draft, some 1, none 4.
    assert window.drafted_per_pos[3] == 0, window.drafted_per_pos
    assert 0 < window.drafted_per_pos[2] < window.drafted_per_pos[0], (window.drafted_per_pos, drafts)
    for a in (one, three):
        got = [v for (arm, _band), v in snap.switchback.items() if arm == a.key]
        outputs = sum(v[live.BAND_COUNTERS.index(live.SB_OUTPUT_TOKENS)] for v in got)
        seconds = sum(v[live.BAND_COUNTERS.index(live.SB_STEP_SECONDS)] for v in got)
        assert outputs > 0 and seconds > 0, (a.key, got)
    k_now = k_in_force(server)
    assert k_now in (1, 3)

    assert server.proc.poll() is None and vllm_child(server) == pid, "vLLM restarted"
    for name, w in counts.items():
        print(f"{name}: drafts {w.drafts:.0f}, drafted per position {w.drafted_per_pos}, "
              f"accepted per position {w.accepted_per_pos}")
    print(f"switchback steps per arm {steps}; K in force at the end {k_now}")
    code, _ = server.stop()
    assert code == 0, server.log_tail()
