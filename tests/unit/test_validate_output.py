"""What `specpilot validate` and `specpilot render` print is read by a person: a long list of problems is
summarised by field, every line is bounded however large the value it quotes, and `render --n` outside
what any method runs is one line naming --n and what is allowed (exit 2), not pydantic's error.

Before: one list of 10,000 candidates printed 9,969 lines; an extra key of 200,000 characters was printed
whole; `render --n -1` printed pydantic's four-line ValidationError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from specpilot.cli import main
from specpilot_runtime.report import summarised
from specpilot_runtime.speculative import MAX_NUM_SPECULATIVE_TOKENS, Problem


def sd(name: str = "big", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment", "metadata": {"name": name},
            "spec": {"model": "Qwen/Qwen3-8B", "speculative": {"method": "mtp", "numSpeculativeTokens": 3}, **spec}}


def write(tmp_path: Path, *docs: dict[str, Any]) -> str:
    path = tmp_path / "sd.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_a_long_candidate_list_is_summarised_by_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 100 candidates: "at most 33 items", then one problem per candidate above 32 (67 of them).
    path = write(tmp_path, sd(tuning={"enabled": True, "candidates": list(range(100))}))
    assert main(["validate", "-f", path]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) <= 22, lines
    assert lines[0] == f"{path}: big: spec.tuning.candidates: must have at most 33 items, got 100"
    assert lines[1] == f"{path}: big: spec.tuning.candidates[33]: must be <= 32, got 33"
    assert lines[-1] == f"{path}: big: spec.tuning.candidates[*]: ... and 64 more problems like this"
    assert "1 SpeculativeDeployment(s) checked, 68 problem(s)" in err  # the count is every problem


def test_render_summarises_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, sd(tuning={"enabled": True, "candidates": list(range(100))}))
    assert main(["render", "-f", path]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) <= 22 and lines[-1].endswith("spec.tuning.candidates[*]: ... and 64 more problems like this")


@pytest.mark.parametrize("doc", [
    sd(speculative={"method": "mtp", "numSpeculativeTokens": 3, "extra": {"k" * 200_000: 1}}),
    sd(speculative={"method": "mtp", "numSpeculativeTokens": 3, "extra": {"rejection_sample_method": "y" * 4000}}),
    sd(name="n" * 100_000),
], ids=["huge-key", "huge-value", "huge-name"])
def test_a_problem_quoting_a_huge_value_is_bounded(tmp_path: Path, doc: dict[str, Any],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", write(tmp_path, doc)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(len(line) < 1200 for line in lines), [len(line) for line in lines]
    assert all("more characters)" in line for line in lines if "k" * 300 in line or "y" * 300 in line)


def test_summarised_keeps_short_lists_and_counts_fields_not_shown() -> None:
    few = [Problem(f"a[{i}]", "x") for i in range(20)]
    assert summarised(few) == few
    many = [Problem(f"f{i}", "x") for i in range(30)]
    out = summarised(many)
    assert out[:20] == many[:20] and out[20:] == [Problem("", "... and 10 more problems")]


@pytest.mark.parametrize("n", ["-1", str(MAX_NUM_SPECULATIVE_TOKENS + 1), "100000000000000000000000"])
def test_render_n_outside_what_any_method_runs_is_one_line_and_exit_2(
        tmp_path: Path, n: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", write(tmp_path, sd()), "--n", n]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"specpilot render: --n {n} is not allowed: N is 0 (no speculation) or 1..{MAX_NUM_SPECULATIVE_TOKENS}"
                   f", and at most the method's own limit\n")


def test_render_n_within_the_range_still_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", write(tmp_path, sd()), "--n", "0", "--track", "canary"]) == 0
    assert "kind: ConfigMap" in capsys.readouterr().out
