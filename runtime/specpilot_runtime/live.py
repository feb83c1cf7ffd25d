"""Draft length set live: the contract between the operator, the serving pod's engine and the operator's scrape.

vLLM draws the draft length K of each step from its batch-size table (`num_speculative_tokens_per_batch_size`,
expanded at start into a dense batch size -> K list the scheduler reads every step), so any K <= the started
N can be served by a running engine once that list is rewritten. The operator writes what it wants served
into `live.json` (the `<name>-live` ConfigMap, mounted at LIVE_DIR; no pod restart: the Deployment's template
does not hash it): one arm (a table) to serve, or two or more arms to alternate between on a randomized
cadence (switchback). The engine reads the file, serves the arm in force, and counts per arm and batch-size
band what the tuner compares: steps, their seconds, sequences stepped, tokens out, drafted and accepted.

Who may set K: whoever may write the ConfigMap (the operator's RBAC), no port or token of our own, and a
restarted pod starts with the table in force. The file is hostile until `parse_live` passes it: bounded
size, whole numbers, vLLM's own table rules (first range at 1, no overlap, 0 <= K <= started N), none under
data parallelism > 1 (vLLM turns the table off there), none for a method whose runner drops the table.

An arm is named by its table (`Arm.key`, e.g. "1-8:5,9-1024:3"), so its counters keep counting whenever the
same table comes back, and the operator finds them by the table it asked for.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .speculative import SCHEDULE_METHODS, schedule_ignored, schedule_k

LIVE_DIR = "/etc/specpilot/live"
LIVE_FILE = "live.json"
# Set by the runtime for the engine: where live.json is, and where the engine core leaves its counters for
# the API server process's /metrics (vLLM runs them as separate processes).
LIVE_FILE_ENV = "SPECPILOT_LIVE_FILE"
LIVE_STATE_ENV = "SPECPILOT_LIVE_STATE"

MAX_LIVE_BYTES = 16_384
MAX_ARMS = 4
MAX_TABLE_ROWS = 16
MAX_BATCH_SIZE = 65_536
MIN_DWELL_S = 0.5
MAX_DWELL_S = 600.0
DEFAULT_DWELL_S = (2.0, 6.0)
# Steps after an arm switch that may still run at the old K: vLLM schedules a step while the previous one
# executes (async scheduling keeps one in flight), so the first steps after a switch belong to neither arm.
SWITCH_DISCOUNT_STEPS = 2
# Arms remembered with their counters; the oldest beyond this are forgotten (bounded label cardinality).
MAX_REMEMBERED_ARMS = 8

# Metrics (the engine exports them on the API port's /metrics; `specpilot:` since vLLM's own names are vLLM's).
LABEL_ARM = "arm"
LABEL_BAND = "band"
LIVE_K = "specpilot:live_num_speculative_tokens"  # gauge {band}: K the engine serves now at that band
LIVE_ARM_ACTIVE = "specpilot:live_arm_active"  # gauge {arm}: 1 for the arm in force, 0 for the others
LIVE_REJECTED = "specpilot:live_config_rejected"  # counter: live.json contents refused
SB_STEPS = "specpilot:switchback_steps"
SB_STEP_SECONDS = "specpilot:switchback_step_seconds"
SB_SEQUENCE_STEPS = "specpilot:switchback_sequence_steps"  # sum over steps of the sequences decoded
SB_OUTPUT_TOKENS = "specpilot:switchback_output_tokens"
SB_DRAFT_TOKENS = "specpilot:switchback_draft_tokens"
SB_ACCEPTED_TOKENS = "specpilot:switchback_accepted_tokens"
SB_FINISHED = "specpilot:switchback_requests_finished"
SB_DISCOUNTED_STEPS = "specpilot:switchback_discounted_steps"  # steps right after a switch, counted in no arm
# Per (arm, band) counters, in the order `BandCounts` keeps them.
BAND_COUNTERS = (SB_STEPS, SB_STEP_SECONDS, SB_SEQUENCE_STEPS, SB_OUTPUT_TOKENS, SB_DRAFT_TOKENS,
                 SB_ACCEPTED_TOKENS, SB_FINISHED)


class LiveConfigError(ValueError):
    """live.json refused: `field` names where, the message what is allowed."""

    def __init__(self, field_path: str, message: str):
        super().__init__(f"{field_path}: {message}")
        self.field = field_path


Table = tuple[tuple[int, int, int], ...]


def band_of(batch_size: int) -> str:
    """The batch-size band a step counts in: powers of two, "1-1", "2-3", "4-7", ... (at most 17 bands)."""
    b = max(1, min(int(batch_size), MAX_BATCH_SIZE))
    lo = 1 << (b.bit_length() - 1)
    return f"{lo}-{2 * lo - 1}"


def band_range(band: str) -> tuple[int, int]:
    """A band label back to its batch sizes; ValueError for anything `band_of` never writes."""
    lo_s, sep, hi_s = band.partition("-")
    if not (sep and lo_s.isascii() and lo_s.isdigit() and hi_s.isascii() and hi_s.isdigit() and len(band) <= 16):
        raise ValueError(f"band {band[:16]!r} is not lo-hi")
    lo, hi = int(lo_s), int(hi_s)
    if lo < 1 or lo > MAX_BATCH_SIZE or lo & (lo - 1) or hi != 2 * lo - 1:
        raise ValueError(f"band {band[:16]!r} is not a power-of-two band")
    return lo, hi


@dataclass(frozen=True)
class Arm:
    """One table the engine may serve: vLLM's `[lo, hi, K]` rows, first at batch size 1, increasing."""

    table: Table

    @property
    def key(self) -> str:
        return ",".join(f"{lo}-{hi}:{k}" for lo, hi, k in self.table)

    def k_at(self, batch_size: int, started_n: int) -> int:
        return schedule_k([list(r) for r in self.table], started_n, batch_size)

    @classmethod
    def uniform(cls, k: int, max_batch: int = MAX_BATCH_SIZE) -> "Arm":
        return cls(((1, max_batch, k),))

    @classmethod
    def from_key(cls, key: str) -> "Arm":
        """An arm label back to its table; ValueError for anything `key` never writes."""
        if len(key) > 256:
            raise ValueError("arm label longer than 256 characters")
        rows = []
        for part in key.split(","):
            span, sep, k = part.partition(":")
            lo, sep2, hi = span.partition("-")
            if not (sep and sep2 and all(s.isascii() and s.isdigit() for s in (lo, hi, k))):
                raise ValueError(f"arm label {key[:32]!r} is not lo-hi:K,...")
            rows.append([int(lo), int(hi), int(k)])
        return cls(_table(rows, "arm", started_n=None))


@dataclass(frozen=True)
class LiveConfig:
    """What live.json asks for: serve `arms[0]` alone, or alternate between the arms with dwell times drawn
    uniformly from `dwell_s` (seconds) by a generator seeded with `seed`."""

    arms: tuple[Arm, ...]
    dwell_s: tuple[float, float] = DEFAULT_DWELL_S
    seed: int = 0

    @property
    def switchback(self) -> bool:
        return len(self.arms) > 1

    def to_json(self) -> str:
        return json.dumps({"arms": [[list(r) for r in a.table] for a in self.arms],
                           "dwellSeconds": list(self.dwell_s), "seed": self.seed}, sort_keys=True)


def _whole(value: object, where: str, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise LiveConfigError(where, f"{str(value)[:32]!r} is not a whole number in {lo}..{hi}")
    return value


def _table(rows: object, where: str, started_n: int | None) -> Table:
    """vLLM's own rules for the table (`v1/spec_decode/dynamic/utils.py`), K bounded by the started N."""
    if not isinstance(rows, list) or not 1 <= len(rows) <= MAX_TABLE_ROWS:
        raise LiveConfigError(where, f"must be a list of 1 to {MAX_TABLE_ROWS} [lo, hi, K] rows")
    out: list[tuple[int, int, int]] = []
    prev_hi = 0
    k_max = MAX_BATCH_SIZE if started_n is None else started_n
    for i, row in enumerate(rows):
        at = f"{where}[{i}]"
        if not isinstance(row, list) or len(row) != 3:
            raise LiveConfigError(at, "must be [lo, hi, K]")
        lo = _whole(row[0], f"{at}[0]", 1, MAX_BATCH_SIZE)
        hi = _whole(row[1], f"{at}[1]", lo, MAX_BATCH_SIZE)
        k = _whole(row[2], f"{at}[2]", 0, k_max)
        if i == 0 and lo != 1:
            raise LiveConfigError(at, "the first batch-size range must start at 1 (vLLM refuses any other)")
        if lo <= prev_hi:
            raise LiveConfigError(at, "batch-size ranges must be increasing and not overlap")
        out.append((lo, hi, k))
        prev_hi = hi
    return tuple(out)


def parse_live(data: bytes, started_n: int, method: str, data_parallel: int = 1) -> LiveConfig:
    """live.json's bytes -> LiveConfig, or LiveConfigError naming the field and what is allowed."""
    if len(data) > MAX_LIVE_BYTES:
        raise LiveConfigError("live.json", f"is {len(data)} bytes; at most {MAX_LIVE_BYTES}")
    if method not in SCHEDULE_METHODS:
        raise LiveConfigError("live.json", schedule_ignored(method))
    if data_parallel > 1:
        raise LiveConfigError("live.json", "vLLM serves no batch-size table under data parallelism > 1")
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise LiveConfigError("live.json", f"is not JSON: {str(e)[:80]}") from None
    if not isinstance(doc, dict) or set(doc) - {"arms", "dwellSeconds", "seed"}:
        raise LiveConfigError("live.json", "must be an object with only arms, dwellSeconds and seed")
    arms = doc.get("arms")
    if not isinstance(arms, list) or not 1 <= len(arms) <= MAX_ARMS:
        raise LiveConfigError("arms", f"must list 1 to {MAX_ARMS} tables")
    tables = tuple(Arm(_table(t, f"arms[{i}]", started_n)) for i, t in enumerate(arms))
    if len({a.key for a in tables}) != len(tables):
        raise LiveConfigError("arms", "the same table twice")
    dwell = doc.get("dwellSeconds", list(DEFAULT_DWELL_S))
    if (not isinstance(dwell, list) or len(dwell) != 2
            or not all(isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) for d in dwell)
            or not MIN_DWELL_S <= dwell[0] <= dwell[1] <= MAX_DWELL_S):
        raise LiveConfigError("dwellSeconds", f"must be [low, high] with {MIN_DWELL_S} <= low <= high <= {MAX_DWELL_S}")
    seed = _whole(doc.get("seed", 0), "seed", 0, 2**63 - 1)
    return LiveConfig(tables, (float(dwell[0]), float(dwell[1])), seed)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


@dataclass
class ArmClock:
    """Which arm is in force when: each round visits every arm once in a random order, each visit lasting a
    dwell drawn from `dwell_s`. Seeded, so a simulated engine and a test can replay it."""

    config: LiveConfig
    start: float
    _rng: random.Random = field(init=False)
    _ends: list[float] = field(init=False, default_factory=list)
    _order: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.config.seed)

    def arm_at(self, now: float) -> int:
        """The index of the arm in force at `now` (times before `start` read as `start`)."""
        if not self.config.switchback:
            return 0
        while not self._ends or self._ends[-1] <= now:
            if len(self._ends) > 4096:  # keep memory bounded on a long-running engine
                self.start, self._ends, self._order = self._ends[-1], [], []
                continue
            round_ = list(range(len(self.config.arms)))
            self._rng.shuffle(round_)
            for idx in round_:
                last = self._ends[-1] if self._ends else self.start
                self._ends.append(last + self._rng.uniform(*self.config.dwell_s))
                self._order.append(idx)
        for end, idx in zip(self._ends, self._order):
            if now < end:
                return idx
        return self._order[-1]


@dataclass
class BandCounts:
    """What one arm counted at one batch-size band."""

    steps: float = 0.0
    step_seconds: float = 0.0
    sequence_steps: float = 0.0
    output_tokens: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    finished: float = 0.0

    def values(self) -> tuple[float, ...]:
        return (self.steps, self.step_seconds, self.sequence_steps, self.output_tokens, self.draft_tokens,
                self.accepted_tokens, self.finished)


@dataclass
class SwitchbackCounters:
    """Per arm and band counts of the steps an engine ran, the steps right after a switch discounted."""

    counts: dict[tuple[str, str], BandCounts] = field(default_factory=dict)
    discounted: dict[str, float] = field(default_factory=dict)
    _last_arm: str | None = None
    _since_switch: int = 0

    def record_step(self, arm: str, batch_size: int, seconds: float, output_tokens: int, draft_tokens: int,
                    accepted_tokens: int, finished: int = 0) -> None:
        """One engine step under `arm` that decoded `batch_size` sequences."""
        if arm != self._last_arm:
            self._last_arm, self._since_switch = arm, 0
        self._since_switch += 1
        if self._since_switch <= SWITCH_DISCOUNT_STEPS:
            self.discounted[arm] = self.discounted.get(arm, 0.0) + 1
            self._forget_old()
            return
        if batch_size < 1 or not math.isfinite(seconds) or seconds < 0:
            return
        c = self.counts.setdefault((arm, band_of(batch_size)), BandCounts())
        c.steps += 1
        c.step_seconds += seconds
        c.sequence_steps += batch_size
        c.output_tokens += output_tokens
        c.draft_tokens += draft_tokens
        c.accepted_tokens += accepted_tokens
        c.finished += finished
        self._forget_old()

    def _forget_old(self) -> None:
        arms = list(dict.fromkeys([*self.discounted, *(a for a, _ in self.counts)]))
        for old in arms[:-MAX_REMEMBERED_ARMS] if len(arms) > MAX_REMEMBERED_ARMS else ():
            self.discounted.pop(old, None)
            for key in [k for k in self.counts if k[0] == old]:
                del self.counts[key]

    def to_json(self) -> dict:
        return {"counts": [[a, b, *c.values()] for (a, b), c in self.counts.items()],
                "discounted": self.discounted}


def exposition(counters: SwitchbackCounters, in_force: Arm | None, arms: Sequence[Arm], started_n: int,
               bands: Iterable[str], rejected: int | None = None) -> str:
    """The counters and what is in force, as Prometheus text (what the engine appends to /metrics);
    `rejected`: live.json contents refused so far, left out when None. A counter's TYPE line names its
    `_total` sample, as the text format (0.0.4) has it: a parser reads the samples as that counter's."""
    lines: list[str] = []
    if rejected is not None:
        lines += [f"# TYPE {LIVE_REJECTED}_total counter", f"{LIVE_REJECTED}_total {float(rejected)!r}"]
    names = {SB_STEPS: "steps", SB_STEP_SECONDS: "step_seconds", SB_SEQUENCE_STEPS: "sequence_steps",
             SB_OUTPUT_TOKENS: "output_tokens", SB_DRAFT_TOKENS: "draft_tokens",
             SB_ACCEPTED_TOKENS: "accepted_tokens", SB_FINISHED: "finished"}
    for metric, attr in names.items():
        lines.append(f"# TYPE {metric}_total counter")
        for (arm, band), c in sorted(counters.counts.items()):
            lines.append(f'{metric}_total{{{LABEL_ARM}="{arm}",{LABEL_BAND}="{band}"}} {getattr(c, attr)!r}')
    lines.append(f"# TYPE {SB_DISCOUNTED_STEPS}_total counter")
    for arm, n in sorted(counters.discounted.items()):
        lines.append(f'{SB_DISCOUNTED_STEPS}_total{{{LABEL_ARM}="{arm}"}} {n!r}')
    if in_force is not None:
        lines.append(f"# TYPE {LIVE_ARM_ACTIVE} gauge")
        for a in arms:
            lines.append(f'{LIVE_ARM_ACTIVE}{{{LABEL_ARM}="{a.key}"}} {1 if a == in_force else 0}')
        lines.append(f"# TYPE {LIVE_K} gauge")
        for band in bands:
            lines.append(f'{LIVE_K}{{{LABEL_BAND}="{band}"}} {in_force.k_at(band_range(band)[0], started_n)}')
    return "\n".join(lines) + "\n"


def bands_up_to(max_batch: int) -> list[str]:
    """Every band a batch of up to `max_batch` sequences can fall in."""
    out, b = [], 1
    while b <= max(1, min(max_batch, MAX_BATCH_SIZE)):
        out.append(band_of(b))
        b *= 2
    return out
