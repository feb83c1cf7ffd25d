"""vLLM's published image, emulated: a vLLM environment without specpilot, where the runtime exists only
as the copy `specpilot-runtime install` writes (what the pod's init container does from the operator
image). `serve` runs from that copy on PYTHONPATH and vLLM loads the drafted-per-position plugin from the
copy's dist-info, so the plugin's metric appears."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from realvllm import Server, TinyModels, VllmVenv
from specpilot_harness.ports import free_port
from specpilot_runtime import vllm_metrics as vm
from test_real_vllm import ENGINE_ARGS, complete_all, scrape

SPECPILOT_ENTRIES = ("specpilot-", "specpilot_", "__editable__.specpilot", "__editable___specpilot")
PLUGIN_GROUP = "vllm.stat_logger_plugins"
DRAFTED = vm.SPEC_DRAFTED_PER_POS


def _site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def _vllm_without_specpilot(venv: VllmVenv, where: Path) -> Path:
    """A venv whose site-packages links every entry of the vLLM venv's except specpilot's editable
    install, with its own `vllm` script; returns its python."""
    base = subprocess.run([str(venv.python), "-c", "import sys; print(sys._base_executable)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    source, target = _site_packages(venv.python), _site_packages(python)
    for entry in source.iterdir():
        if not entry.name.startswith(SPECPILOT_ENTRIES) and not (target / entry.name).exists():
            (target / entry.name).symlink_to(entry)
    script = (venv.python.parent / "vllm").read_text().split("\n", 1)[1]
    (where / "bin" / "vllm").write_text(f"#!{python}\n{script}")
    (where / "bin" / "vllm").chmod(0o755)
    return python


def _probe(python: Path, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    code = ("import importlib.metadata as m, importlib.util as u; s = u.find_spec('specpilot_runtime'); "
            f"print(s.origin if s else None); print(sorted(str(e.dist._path) for e in m.entry_points(group={PLUGIN_GROUP!r})))")
    # `-c` and `-m` put the working directory first on sys.path: a pod's is not a source checkout.
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, check=True,
                          cwd=cwd)


def test_serve_runs_from_the_copied_runtime_and_the_plugin_metric_appears(
        vllm_venv: VllmVenv, vllm_env: dict[str, str], tiny_models: TinyModels, workdir: Path) -> None:
    clean = workdir / "vllm-without-specpilot"
    shutil.rmtree(clean, ignore_errors=True)
    python = _vllm_without_specpilot(vllm_venv, clean)
    copy = workdir / "runtime-copy"
    shutil.rmtree(copy, ignore_errors=True)
    # The operator image's side: this project's venv, where specpilot is installed.
    subprocess.run([str(Path(sys.executable).parent / "specpilot-runtime"), "install", "--to", str(copy)],
                   check=True)
    env = {k: v for k, v in vllm_env.items() if k != "PYTHONPATH"}
    without = _probe(python, env, workdir).stdout.splitlines()
    assert without == ["None", "[]"], f"specpilot is importable without the copy: {without}"
    env["PYTHONPATH"] = str(copy)
    origin, dists = _probe(python, env, workdir).stdout.splitlines()
    assert origin == str(copy / "specpilot_runtime" / "__init__.py")
    assert dists == repr([str(next(copy.glob("*.dist-info")))])

    port = free_port()
    config = workdir / "copied.engine.json"
    config.write_text(json.dumps({
        "model": str(tiny_models.target), "accelerator": {"vendor": "cpu"}, "args": ENGINE_ARGS,
        "host": "127.0.0.1", "port": port, "served_model_name": "tiny-copied",
        "speculative": {"method": "ngram", "num_speculative_tokens": 3,
                        "extra": {"prompt_lookup_min": 2, "prompt_lookup_max": 4}}}))
    log = workdir / "copied.log"
    with log.open("wb") as out:
        # The pod's command with vLLM's image: its python3, the runtime only on PYTHONPATH.
        proc = subprocess.Popen([str(python), "-m", "specpilot_runtime.cli", "serve", "--config", str(config)],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=workdir)
    server = Server(proc, f"http://127.0.0.1:{port}", log, "tiny-copied")
    try:
        server.wait_healthy()
        complete_all(server)
        snap = scrape(server)
        assert snap.drafts > 0, "no drafts counted"
        assert snap.drafted_per_pos is not None and len(snap.drafted_per_pos) == 3, \
            f"{DRAFTED} missing: the plugin was not loaded from the copy\n{server.log_tail()}"
        code, _ = server.stop()
        assert code == 0, server.log_tail()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
