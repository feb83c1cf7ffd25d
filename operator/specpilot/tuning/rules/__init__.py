"""The tuner's decisions as ordered rules: each a small function of one window's context that returns the
controller's `Action` (or what it decides), or None to leave the decision to the rules after it.

- `observing`: a round between canaries (plan the next canary, or converge);
- `analysing`: a running canary after the judge's ruling (promote, roll back, probe, or keep analysing);
- `converged`: a converged round watching for what starts the next one;
- `tournament`: the method tournament's window, stage by stage (`tournament.step`); `method_pick`: which
  method canary an idle tournament starts; `method_analysis`: a method canary after the judge's ruling.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from ..actions import Action

C = TypeVar("C")
R = TypeVar("R")
Rule = Callable[[C], "Action | None"]


def first(rules: Sequence[Callable[[C], R | None]], context: C) -> R:
    """What the first rule that decides returns; the last rule of every list always does."""
    for rule in rules:
        decided = rule(context)
        if decided is not None:
            return decided
    raise AssertionError(f"no rule decided (the last of {[r.__name__ for r in rules]} always should)")
