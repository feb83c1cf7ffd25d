"""`specpilot-runtime serve --config X` never dies with a traceback: whatever X is (a device, a FIFO, a
directory, a huge or deeply nested file, bytes that are not UTF-8) or holds (a model path the kernel cannot
open, an environment variable execve cannot pass), it says what is wrong in one line on stderr, naming the
file or the field and what is allowed, and exits 2. Before, an over-long path component in the model
path crashed with an OSError traceback (and the pod crash-looped), 200,000 nested brackets with a
RecursionError, and `--config /dev/zero` read until MemoryError.

`specpilot validate` refuses the same model paths, through the same rule (speculative.path_problem)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specpilot.api.validate import validate_object
from specpilot_runtime.cli import main
from specpilot_runtime.engine_config import EngineConfig
from specpilot_runtime.serve import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH
from specpilot_runtime.speculative import NAME_MAX, PATH_MAX

ENGINE: dict[str, Any] = {"model": "Qwen/Qwen3-8B", "accelerator": {"vendor": "cpu"},
                          "speculative": {"method": "ngram", "num_speculative_tokens": 3}}


def refused(capsys: pytest.CaptureFixture[str], config: Path | str) -> str:
    """The one line `serve --dry-run` prints for `config`, which it must refuse with exit code 2."""
    assert main(["serve", "--config", str(config), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err[:2000]
    assert lines[0].startswith(f"specpilot-runtime: {config}: ")
    return lines[0]


def written(tmp_path: Path, engine: dict[str, Any] | str | bytes) -> Path:
    path = tmp_path / "engine.json"
    if isinstance(engine, bytes):
        path.write_bytes(engine)
    else:
        path.write_text(engine if isinstance(engine, str) else json.dumps(engine))
    return path


def long_component(parent: Path) -> str:
    """A path whose last component is 300 bytes, under a directory that exists, so the kernel gets as far
    as that component (ENAMETOOLONG), as it does under a pod's /models."""
    return str(parent / ("m" * 300))


@pytest.mark.parametrize("field", ["model", "draft"])
def test_an_over_long_path_component_names_the_field_and_the_limit(tmp_path: Path, field: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    engine = {**ENGINE, "speculative": {"method": "draft_model", "model": "org/draft", "num_speculative_tokens": 3}}
    if field == "model":
        engine["model"] = long_component(tmp_path)
    else:
        engine["speculative"]["model"] = long_component(tmp_path)
    line = refused(capsys, written(tmp_path, engine))
    where = "model" if field == "model" else "speculative.draftModel"
    assert f": {where}: " in line and str(NAME_MAX) in line and "300 bytes" in line, line
    assert len(line) < 400, line  # the 300-byte component is not quoted whole


def test_an_over_long_path_names_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = "/".join(["d" * 200] * 25)  # 5,024 bytes in components the kernel takes
    line = refused(capsys, written(tmp_path, {**ENGINE, "model": f"{tmp_path}/{deep}"}))
    assert ": model: " in line and str(PATH_MAX) in line, line


def test_a_checkpoint_that_cannot_be_inspected_is_one_line_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Within PATH_MAX itself, but not with "/config.json" appended: the kernel refuses to open that.
    model = "/" + "/".join(["d" * 200] * 20) + "/" + "x" * (PATH_MAX - 4 - 20 * 201)
    assert len(model.encode()) <= PATH_MAX
    line = refused(capsys, written(tmp_path, {**ENGINE, "model": model}))
    assert ": model: cannot read " in line and "File name too long" in line, line
    assert len(line) < 700, line


def nested(depth: int) -> str:
    return json.dumps({**ENGINE, "speculative": {**ENGINE["speculative"], "extra": {"x": "@"}}}) \
        .replace('"@"', "[" * depth + "]" * depth)


@pytest.mark.parametrize("depth", [200_000, 2_000, MAX_CONFIG_DEPTH + 1])
def test_deep_nesting_is_refused_naming_the_bound(tmp_path: Path, depth: int,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, written(tmp_path, nested(depth)))
    assert f"nested deeper than {MAX_CONFIG_DEPTH} levels" in line, line


def test_nesting_at_the_bound_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The config object, speculative, extra, "x": 3 levels above the brackets.
    main(["serve", "--config", str(written(tmp_path, nested(MAX_CONFIG_DEPTH - 3))), "--dry-run"])
    assert "nested deeper" not in capsys.readouterr().err


def test_a_file_past_the_size_bound_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Valid JSON: before, it was read whole and served.
    padded = written(tmp_path, " " * (MAX_CONFIG_BYTES + 1) + json.dumps(ENGINE))
    line = refused(capsys, padded)
    assert f"larger than {MAX_CONFIG_BYTES // 1024} KiB" in line, line
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024)  # 100 MB, sparse
    assert "larger than" in refused(capsys, huge)


@pytest.mark.parametrize("config,words", [
    ("dir", "is a directory, not a regular file"),
    ("/dev/null", "is a character device, not a regular file"),
    ("missing", "cannot read: No such file or directory"),
])
def test_what_is_not_a_regular_file_is_refused(tmp_path: Path, config: str, words: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(config) if config.startswith("/") else tmp_path / config
    if config == "dir":
        path.mkdir()
    line = refused(capsys, path)
    assert words in line, line
    assert line.count(str(path)) == 1, line  # the file is named once


def test_bytes_that_are_not_utf8_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, written(tmp_path, b'{"model": "\xff"}'))
    assert "not UTF-8 (byte 0xff at offset 11)" in line, line


@pytest.mark.parametrize("engine,field", [
    ({**ENGINE, "env": {"A=B": "1"}}, "env"),
    ({**ENGINE, "env": {"": "1"}}, "env"),
    ({**ENGINE, "host": "0.0.0.0\u0000"}, "host"),
    ({**ENGINE, "model": "m\ud800"}, "model"),  # a lone surrogate: no bytes to pass to execve
])
def test_what_execve_cannot_pass_is_refused_naming_the_field(tmp_path: Path, engine: dict[str, Any], field: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(capsys, written(tmp_path, json.dumps(engine)))
    assert f": {field}" in line, line


def test_many_problems_are_summarised_and_a_huge_value_is_not_repeated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = written(tmp_path, {**ENGINE, "args": list(range(50_000))})
    assert main(["serve", "--config", str(config), "--dry-run"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) <= 25 and "49997 more problems like this" in lines[-1], lines
    value = "x" * 500_000
    config = written(tmp_path, {**ENGINE, "speculative": {**ENGINE["speculative"],
                                                          "extra": {"rejection_sample_method": value}}})
    assert main(["serve", "--config", str(config), "--dry-run"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "rejection_sample_method" in line and len(line) < 1000, line[:300]


def run_limited(config: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`serve --config config` in its own interpreter, its memory capped at 1 GiB: reading /dev/zero whole
    must fail the test, not the machine."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    return subprocess.run([sys.executable, "-m", "specpilot_runtime.cli", "serve", "--config", config, "--dry-run"],
                          capture_output=True, text=True, timeout=timeout, preexec_fn=cap)


def test_dev_zero_is_refused_without_reading_it() -> None:
    done = run_limited("/dev/zero")
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert done.stderr == "specpilot-runtime: /dev/zero: is a character device, not a regular file; " \
                          "--config takes engine.json, a file of at most 1024 KiB\n"


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "engine.json"
    os.mkfifo(fifo)
    done = run_limited(str(fifo), timeout=30)
    assert done.returncode == 2 and "is a FIFO, not a regular file" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_the_grace_period_must_be_a_finite_number_of_seconds(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    for value in ("nan", "-1", "inf"):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", "--config", str(written(tmp_path, ENGINE)), "--grace-period", value])
        assert exit_.value.code == 2
        assert "--grace-period" in capsys.readouterr().err


# --- the operator refuses the same paths ---

SD: dict[str, Any] = {"apiVersion": "specpilot.io/v1alpha1", "kind": "SpeculativeDeployment",
                      "metadata": {"name": "chat"},
                      "spec": {"model": "Qwen/Qwen3-8B",
                               "speculative": {"method": "draft_model", "draftModel": "org/draft",
                                               "numSpeculativeTokens": 3}}}


@pytest.mark.parametrize("where", ["spec.model", "spec.speculative.draftModel",
                                   "spec.tuning.alternatives[0].draftModel"])
def test_validate_refuses_the_model_paths_the_runtime_refuses(where: str) -> None:
    sd = json.loads(json.dumps(SD))
    long = "/models/" + "m" * 300
    if where == "spec.model":
        sd["spec"]["model"] = long
    elif where == "spec.speculative.draftModel":
        sd["spec"]["speculative"]["draftModel"] = long
    else:
        sd["spec"]["tuning"] = {"enabled": True, "alternatives": [
            {"method": "eagle3", "draftModel": long, "numSpeculativeTokens": 3}]}
    problems = validate_object(sd)
    assert [p.path for p in problems] == [where], problems
    assert f"at most {NAME_MAX} bytes" in problems[0].message
    runtime = EngineConfig.model_validate({"model": long, "speculative": {"method": "eagle3", "model": long,
                                                                          "num_speculative_tokens": 3}})
    assert {p.message for p in runtime.problems()} == {problems[0].message}
