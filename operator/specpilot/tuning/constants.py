"""Every number that steers the tuner, with where it comes from.

One line per constant: what it bounds, then its provenance, one of
- [formula]   derived (the formula is given);
- [measured]  measured on hardware (the file is named);
- [chosen]    chosen on a named benchmark split (docs/benchmark.md, "Why the tuner's rules and constants are
              what they are", has the numbers);
- [safety]    a bound that keeps the tuner cautious or sane: a sceptical prior, a least amount of evidence, a
              bound on data the tuner did not write (a forged status or counter), an engineering limit
              (memory, status size, numerical floors);
- [by hand]   set by reasoning when the code was written, no benchmark split recorded (a candidate for one).
Modules import their constants from here; a unit test (tests/unit/test_tuning_constants.py) fails on a bare
number anywhere else in the package.
"""

from __future__ import annotations

import math

import numpy as np

from specpilot_runtime.speculative import Family

# --- Windows and rounds (machine.py, rules/) ---------------------------------------------------------------

# Stable windows at the current N before the first plan of a round. [formula: the fewest windows with a spread]
OBSERVE_WINDOWS = 2
# Windows of load a round must see before it may converge (the best N depends on the mix). [chosen: article]
CONVERGE_WINDOWS = 6
# Windows in the load mix before a canary the judge found better is promoted. [chosen: mixed-load.json]
PROMOTE_MIX_WINDOWS = 16
# Default top candidate N when the spec lists none, per drafter family. [measured: docs/references.md §1 sweeps]
DEFAULT_MAX_CANDIDATE: dict[Family, int] = {Family.SEQUENTIAL: 8, Family.NEAR_FREE: 8}
# Most a rival's expected lead over a proven canary may be, in margins, for the canary to be probed.
# [chosen: mixed-load.json, generated-dev.json]
PROBE_LEAD_MARGINS = 3.0
# Least a rival's expected lead over a proven canary must be for the canary to be probed, whatever the
# margin: half a canary's margin, the model's error between neighbours. Under switchback (margin 0.5%) a
# lead of a quarter of a percent is the model's noise, and the probe risked the proven N for it.
# [chosen: generated-holdout2.json, generated-dev.json]
PROBE_MIN_LEAD = 0.01

# --- The judge (judge.py) ----------------------------------------------------------------------------------

# Paired windows before the first verdict. [safety: fewer would judge noise]
MIN_WINDOWS = 4
# A canary needs the judge's MIN_WINDOWS paired windows left in the round to start. [formula: = MIN_WINDOWS]
CANARY_MIN_WINDOWS = MIN_WINDOWS
# Times the configured windows a canary measured better but unproven keeps analysing. [chosen: generated-dev.json]
EXTEND = 3
# Share of the round's goodput (by load level) the pairs must have seen before a promotion. [safety]
COVERAGE = 0.8
# Windows a load level needs before it counts as covered (two say little of its noise). [safety]
LEVEL_WINDOWS = 3
# Windows' worth of the pooled spread each level's spread is shrunk towards. [safety: few windows look certain]
LEVEL_PRIOR_DOF = 4.0
# Sceptical prior sd of the true log goodput ratio (0 +- 15%). [safety: sceptical]
GAIN_PRIOR_SD = 0.15
# Log gain a canary may have, for all a rollback knows, at loads no pair came near. [safety: wide on purpose]
UNSEEN_UPSIDE_SD = 1.0
# Log loss per octave a longer N may have at loads heavier than any pair saw.
# [measured: data/step-cost (compute-bound N=1: +16% at 4 to -23% at 16 sequences per pod)]
UNSEEN_DOWNSIDE_SD_PER_OCTAVE = 0.15
# Prior sd of the paired log goodput ratio's per-window spread. [safety: a dozen windows may scatter at half of it]
JUDGE_NOISE_PRIOR_SD = 0.06
# The same for a switchback arm against the stable's: both run in the same pods at the same load, seconds
# apart, so only the dwells' own variation is left (the simulated engine's: 2.3% at 5-minute windows; a real
# engine's spread is its own, and the prior is only a few windows' worth). [by hand]
SWITCHBACK_NOISE_PRIOR_SD = 0.03
# Windows' worth of that prior. [chosen: article.json, generated-dev.json tournaments]
JUDGE_NOISE_PRIOR_DOF = 8.0
# Stable windows the load slope of log TPOT needs. [safety]
SLOPE_WINDOWS = 4
# Least rms spread of log load around each N's mean for a slope (0.1 is about 10%). [safety]
SLOPE_MIN_SPREAD = 0.1
# Highest load slope the projection of a pair to the stable's alone load trusts (1: no fixed cost). [safety]
PROJECTION_MAX_SLOPE = 0.95
# Standard errors below the estimated load slope that the projection uses. [chosen: generated-dev.json]
PROJECTION_SLOPE_Z = 3.0
# Below this share of the served load a verdict notes where its pairs ran. [safety: 1 - rounding]
SPLIT_NOTE_BELOW = 0.95
# Errors per canary pod the health gate always allows (one restart is not the N's fault). [safety]
ERROR_SLACK = 1.0
# Lowest relative gain the judge's power takes a log of (log1p(-1) is -inf). [safety]
MIN_RELATIVE_GAIN = -0.99
# Floor on an estimate's sd when no level differs yet (keeps divisions finite). [safety]
MIN_ESTIMATE_SD = 1e-9
# Float tolerance when a level is within one octave of the pairs. [safety: rounding of log2]
OCTAVE_TOLERANCE = 1e-9

# --- The planner (planner.py) and the tournament (tournament.py) -------------------------------------------

# Posterior samples the planner draws per decision. [safety: precision against CPU time]
PLAN_SAMPLES = 256
# Central credible interval of each candidate's expected gain the plan keeps: its lower end is what the
# "slower than no speculation" alert must clear (one-sided 95%). [by hand]
PLAN_INTERVAL = 0.9
# Windows a canary spends restarting, serving nothing. [by hand]
RESTART_WINDOWS = 1.0
# How much slower (against the stable's step time) than the next window a canary's first analysed one may be
# and still count (a slower one is warm-up: warmup.py). [chosen: article.json, generated-dev.json: above
# the 10% step-time noise of two paired windows]
WARMUP_STEP_TOLERANCE = 0.2
# Windows after the one a canary became ready in that warm-up may still drop. [safety: a canary that never
# settles is judged as it is]
WARMUP_MAX_WINDOWS = 2
# Share of every stable pod's serving a switchback arm takes: two arms alternate with equal dwells. [formula]
LIVE_ARM_SHARE = 0.5
# Windows a canary is typically analysed for. [by hand]
ANALYSIS_WINDOWS = 3.0
# Windows over which a better N pays back; a round is judged against it. [by hand: 8 hours of 5-minute windows]
VALUE_HORIZON_WINDOWS = 96.0
# Below this chance of proving the margin, an N expected inside it is a near tie. [chosen: mixed-load.json]
TIE_PROBABILITY = 0.1
# Least value net of cost a canary must promise. [chosen: article.json, generated-dev.json]
MIN_NET_VALUE = 0.010
# An untried method's log goodput against the stable's, prior sd. [measured: docs/references.md §1, 10-40%]
METHOD_PRIOR_SD = 0.25
# Windows a method canary serves nothing while another checkpoint loads. [by hand]
SWITCH_RESTART_WINDOWS = 2.0
# Stratified normal quantiles for expectations over a loser's goodput. [safety: precision against CPU time]
UNIT_QUANTILE_POINTS = 64
# Step-cost samples drawn to anchor a method canary's pairs to N = 0. [safety: precision against CPU time]
ANCHOR_SAMPLES = 64

# --- The batch-size schedule (schedule.py) -----------------------------------------------------------------

# Upper end of the last batch-size range: above any max_num_seqs a deployment runs. [safety]
MAX_BATCH_SIZE = 4096
# Posterior samples a schedule proposal draws. [safety: precision against CPU time]
SCHEDULE_SAMPLES = 256
# Relative goodput by which a larger started N must beat a smaller one. [chosen: mixed-load.json]
STARTED_TIE = 0.002

# --- The step-time model (step_model.py, costs.py) ---------------------------------------------------------

# Grid of kappa (how far a machine is from a measured shape), log-spaced. [safety: spans 1/4x to 4x]
KAPPA_GRID = np.exp(np.linspace(math.log(0.25), math.log(4.0), 41))
# Prior sd of log kappa. [measured: cost_shapes.py, the shapes span the machines]
KAPPA_PRIOR_SD = 0.5
# Weak prior on the per-window noise of a paired log step-time ratio: sd and weight. [safety: weak]
STEP_NOISE_PRIOR_SD = 0.1
STEP_NOISE_PRIOR_DOF = 2.0
# Random-walk step (log cost per N) of the correction and its load interaction. [chosen: generated-dev.json]
CORRECTION_SD = 0.03
# Prior sd of the correction's slope (log cost per N). [safety]
SLOPE_SD = 0.1
# Most the learned level t(0, B) may depart from the prior's shape across loads, in log. [safety: 1000x]
LEVEL_SPAN = math.log(1000.0)
# Floor on the noise sd the correction is fitted with (a perfect fit must not pin it). [safety]
MIN_NOISE_SD = 0.02
# Prior sd of a block drafter's jump (log cost of drafting at all). [chosen: generated-dev.json tournaments]
JUMP_SD = 0.1
# Largest |log t_canary / t_stable| a pair read from a status may hold (exp() stays finite). [safety]
MAX_LOG_RATIO = 50.0
# Octaves of load the correction's load term spans: u(B) = log2 B / 8 is 1 at 256 sequences per pod.
# [measured: cost_shapes.py, whose loads go to 256]
CORRECTION_LOAD_OCTAVES = 8.0
# Knots per octave of load at which the level t(0, B) is fitted. [by hand: a real engine's loads scatter within one]
LEVEL_KNOTS_PER_OCTAVE = 4
# Jitter added to the correction's covariance before its Cholesky factor. [safety: numerical]
CHOLESKY_JITTER = 1e-12
# Largest N the overhead tables are built for (block drafters go to at most 16). [safety]
COST_TABLE_MAX_N = 32
# Loads B_0 at which a compute-bound roofline shape's per-step floor is overtaken. [safety: span 1 to 16]
ROOFLINE_FLOOR_LOADS = (1.0, 4.0, 16.0)
# Cache sizes of the overhead functions. [safety: memory]
OVERHEAD_CACHE_SIZE = 8192
OVERHEAD_TABLE_CACHE_SIZE = 64
# Milliseconds in a second. [formula]
MS_PER_S = 1000.0

# --- Acceptance: survival (survival.py) and transfer (transfer.py) -----------------------------------------

# Design effect of one window's drafts when no between-window spread exists. [safety: drafts correlate]
SINGLE_WINDOW_DESIGN_EFFECT = 100.0
# Floor on a survival estimate's standard error. [safety]
MIN_SE = 1e-4
# Spread of the extrapolated conditional acceptance beyond the deepest observed position. [safety]
EXTRAPOLATION_SD = 0.08
# Relative spread when borrowing a parallel drafter's curve from another N, per sqrt distance.
# [chosen: generated-dev.json tournaments]
BORROW_SD = 0.05
# How much faster than measured above it a parallel drafter's curve may move with N below it. [safety]
LOCAL_RATE_FACTOR = 2.0
# Shared positions before a per-position ratio between two N gets a trend in depth. [safety]
MIN_TREND_POSITIONS = 3
# Standard errors above S_K at which the optimistic bound caps beliefs beyond the observed depth. [safety]
BOUND_Z = 3.0
# Belief when nothing was observed: S_1 and conditional acceptance, mean and sd. [measured: the article's
# drafters' first positions, docs/references.md §1]
NO_DATA_S1 = (0.6, 0.2)
NO_DATA_COND = (0.8, 0.1)
# Clip bounds of the sampled no-data S_1 and conditional acceptance (keep both probabilities). [safety]
NO_DATA_S1_CLIP = (0.02, 0.98)
NO_DATA_COND_CLIP = (0.05, 0.99)

# --- Drift (drift.py) and evidence (evidence.py) -----------------------------------------------------------

# Windows of the post-convergence reference and of the recent mean compared with it. [safety: fewer read noise]
REFERENCE_WINDOWS = 6
ACCEPTANCE_WINDOWS = 6
# Standard errors the difference of the two means must exceed. [safety: looked at every window]
ACCEPTANCE_Z = 4.0
# Steps an arm must have run at a batch-size band in a window for the band's numbers to count (schedule mode
# under switchback, bands.py): a band the batch only passed through is a handful of steps. [safety]
MIN_BAND_STEPS = 50
# Fewest configured windows a band's judge gets (bands.band_windows; a canary's default is 6). [safety]
MIN_BAND_WINDOWS = 2
# How far a band's mean batch size (sequence-steps over steps, counters summed over pods) may read outside
# the band's batch sizes before its counters are taken as no engine's. [safety: rounding only]
BAND_SLACK = 0.01
# Pieces of evidence kept for a retry (the best measured). [safety: status size]
MAX_CARRIED = 2
# Paired windows kept per piece. [formula: EXTEND x the default 6 windows, twice]
MAX_CARRIED_PAIRS = 36

# --- The status (state.py, tournament_state.py) and window bounds (observations.py) -------------------------

# Window records kept (both tracks). [safety: status size]
MAX_RECORDS = 120
# Recent stable windows whose loads make the mix the planner weighs. [safety: the present, not all history]
LOADS_KEPT = 48
# Records the running canary's analysis keeps. [formula: half of MAX_RECORDS, so the stable keeps its half]
ANALYSIS_KEPT = MAX_RECORDS // 2
# Paired step times kept; decisions kept in the history; characters of a note. [safety: status size]
MAX_PAIRS = 128
MAX_HISTORY = 50
# Per-band records the running switchback canary keeps (bands.py), both arms. [safety: status size]
MAX_BAND_RECORDS = 480
MAX_NOTE = 1024
# The running method canary's windows kept. [safety: status size]
METHOD_CANARY_MAX_RECORDS = 48
# Characters of a failed method canary's reason kept. [safety: status size]
MAX_FAILURE = 256
# Fields of a loser's option in the status: [N, expected goodput, sd]. [formula]
OPTION_LEN = 3
# Largest counter (a window's seq, a canary count) read back from a status. [safety: a 64-bit int]
MAX_COUNTER = 2 ** 62
# Largest N a window can have run (spec.speculative.blockSize's limit). [safety]
MAX_N = 64
# Counts of one window and seconds since the epoch. [safety: an engine counts ~1e5 tokens/s per pod]
MAX_MAGNITUDE = 1e15
# Running sequences per pod. [safety: vLLM's max_num_seqs is in the hundreds to thousands]
MAX_LOAD = 1e6
# Seconds one verify step may take: a microsecond to an hour. [safety]
MIN_STEP_S, MAX_STEP_S = 1e-6, 3600.0
# Tokens a second one pod can emit: a thousand times an H200's. [safety]
MAX_TOKEN_RATE = 1e8
# Rounding slack when one counter bounds another (summed over pods as floats). [safety]
COUNTER_SLACK = 1e-6
# Characters of a rejected value echoed in an error. [safety: status size]
ECHO_CHARS = 32


# --- SLO and queueing gates (slo.py, slo_gate.py, rules/analysing.py) --------------------------------------

# Seconds a latency percentile is held to in a record: a percentile in the +Inf bucket (above every finite
# bound) is kept as this, which is above the longest SLO (spec.tuning.slo.ttft <= 1h). [safety: status, JSON
# has no infinity]
LATENCY_CEILING_S = 1e4
# A canary's median percentile must exceed the SLO by this share to break it: interpolation inside vLLM's
# wide buckets (1 s to 2.5 s for TTFT) moves a percentile by more than a hair's breadth. [by hand]
SLO_TOLERANCE = 0.05
# Where the stable breaks an SLO too, a canary whose median share of requests meeting it is lower by more than
# this fails those users: five points is beyond what a window's histogram interpolation moves. [by hand]
ATTAINMENT_DROP = 0.05
# A canary queues clearly more than the stable when its median waiting requests per pod exceed this many
# times the stable's, plus QUEUE_SLACK requests per pod: a queue of one or two comes and goes. [by hand]
QUEUE_RATIO = 2.0
QUEUE_SLACK = 1.0
# Likewise for preemptions per pod and window: a stray preemption is vLLM making room, not the N's cost.
# [by hand]
PREEMPT_RATIO = 2.0
PREEMPT_SLACK = 1.0
# Decimals a record keeps of a latency percentile (seconds: a microsecond) and of waiting requests and
# preemptions per pod. [safety: status size, 120 records of four numbers each]
LATENCY_DIGITS = 6
COUNT_DIGITS = 3
