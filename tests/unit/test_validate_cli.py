"""`specpilot validate`: files, multi-document YAML, stdin, output format and exit codes."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import yaml

from specpilot.cli import main

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "deploy" / "examples").glob("*.yaml"))

GOOD = """\
apiVersion: specpilot.io/v1alpha1
kind: SpeculativeDeployment
metadata: {name: good}
spec:
  model: Qwen/Qwen3-8B
  speculative: {method: mtp, numSpeculativeTokens: 3}
"""

BAD = """\
apiVersion: specpilot.io/v1alpha1
kind: SpeculativeDeployment
metadata: {name: bad}
spec:
  model: Qwen/Qwen3-8B
  speculative: {method: eagle3, numSpeculativeTokens: 3}
  engine: {args: [--speculative-config, "{}"]}
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_valid_file_exits_zero_and_prints_no_problem(tmp_path, capsys) -> None:
    assert main(["validate", "-f", _write(tmp_path, "good.yaml", GOOD)]) == 0
    out = capsys.readouterr()
    assert out.out == ""
    assert "1 SpeculativeDeployment(s) checked, 0 problem(s)" in out.err


def test_problems_print_one_line_each_as_file_name_field_message(tmp_path, capsys) -> None:
    path = _write(tmp_path, "both.yaml", GOOD + "---\n" + BAD)
    assert main(["validate", "-f", path]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{path}: bad: spec.speculative.draftModel: method eagle3 needs a draft model (hub id or path)",
        f"{path}: bad: spec.engine.args[0]: --speculative-config is reserved: set spec.speculative instead",
    ]


def test_repeatable_files_and_stdin(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BAD.encode())))
    assert main(["validate", "-f", _write(tmp_path, "good.yaml", GOOD), "-f", "-"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("-: bad: spec.speculative.draftModel:")


def test_other_kinds_are_skipped_and_broken_yaml_is_a_problem(tmp_path, capsys) -> None:
    path = _write(tmp_path, "mixed.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: llm}\n---\n" + GOOD)
    assert main(["validate", "-f", path]) == 0
    assert "1 other object(s) skipped" in capsys.readouterr().err
    broken = _write(tmp_path, "broken.yaml", "spec: [unclosed\n")
    assert main(["validate", "-f", broken]) == 1
    assert capsys.readouterr().out.startswith(f"{broken}: -: not valid YAML")


def test_missing_file_and_empty_input_fail(tmp_path, capsys) -> None:
    assert main(["validate", "-f", str(tmp_path / "absent.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().out
    assert main(["validate", "-f", _write(tmp_path, "empty.yaml", "")]) == 1
    assert "no SpeculativeDeployment found" in capsys.readouterr().err


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_every_example_validates(example: Path, capsys) -> None:
    assert main(["validate", "-f", str(example)]) == 0, capsys.readouterr().out


def test_examples_cover_every_method() -> None:
    methods = {yaml.safe_load(e.read_text())["spec"]["speculative"]["method"] for e in EXAMPLES}
    assert {"mtp", "eagle3", "dflash", "dspark", "ngram", "off"} <= methods
    assert any("draftModel" in yaml.safe_load(e.read_text())["spec"]["speculative"]
               for e in EXAMPLES if "mtp" in e.stem)


def test_a_document_that_is_not_an_object_is_a_problem(tmp_path, capsys) -> None:
    path = _write(tmp_path, "list.yaml", "- a\n- b\n")
    assert main(["validate", "-f", path]) == 1
    assert capsys.readouterr().out == f"{path}: document 1: (object): must be a SpeculativeDeployment object, got list\n"


ALIAS_BOMB = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))

# (case id, file bytes, words of the one line)
HOSTILE_FILES = [
    ("alias-bomb", ALIAS_BOMB.encode(), "expands to more than 100000 values"),
    ("recursive-alias", b"a: &a [*a]\n", "recursive"),
    ("deep-block-nesting", "".join(" " * i + "k:\n" for i in range(500)).encode(), "nested deeper than 64"),
    ("deep-flow-nesting", b"[" * 100_000 + b"]" * 100_000, "not valid YAML"),
    ("latin-1", "metadata: {name: caf\xe9}\n".encode("latin-1"), "not UTF-8 text (byte 0xe9 at offset 20)"),
    ("utf-16", "kind: SpeculativeDeployment\n".encode("utf-16"), "not UTF-8"),
    ("nul-byte", b"kind: Speculative\x00Deployment\n", "control characters"),
    ("huge", b"a: 1\n" * 200_000, "larger than 512 KiB"),
    ("many-documents", b"{}\n---\n" * 2000, "more than 1000 documents"),
]


@pytest.mark.parametrize(("data", "words"), [c[1:] for c in HOSTILE_FILES], ids=[c[0] for c in HOSTILE_FILES])
def test_a_hostile_file_is_one_line_and_exit_1(tmp_path, capsys, data: bytes, words: str) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_bytes(data)
    assert main(["validate", "-f", str(path)]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{path}: -: ") and words in line, line
    assert len(line) < 500


def test_yaml_merge_keys_and_a_bom_still_read(tmp_path, capsys) -> None:
    path = tmp_path / "merge.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.replace("  model: Qwen/Qwen3-8B\n", "  <<: {model: Qwen/Qwen3-8B}\n")
                     .encode())
    assert main(["validate", "-f", str(path)]) == 0, capsys.readouterr().out
