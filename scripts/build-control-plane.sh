#!/usr/bin/env bash
# Builds a real Kubernetes control plane from source, once, and caches it outside the checkout:
#   kube-apiserver, kube-controller-manager, kube-scheduler  from the Go module k8s.io/kubernetes
#   etcd                                                     from go.etcd.io/etcd/server/v3 (its main package)
# into ${SPECPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specpilot}/control-plane/<k8s-version>/bin/.
# The bin directory is the last line on stdout (BIN=$(scripts/build-control-plane.sh | tail -1));
# progress goes to stderr. A second run returns at once.
#
# Knobs: SPECPILOT_K8S_VERSION (v1.36.3), SPECPILOT_ETCD_VERSION (v3.6.16),
#        SPECPILOT_ETCD_REPLACE (auto|always|never: pin the etcd client modules of the Kubernetes build to
#        SPECPILOT_ETCD_VERSION; auto does it only when a version Kubernetes asks for is not served),
#        SPECPILOT_BUILD_NICE (10), GOTOOLCHAIN (passed through: export e.g. go1.27.3 if a newer Go is needed).
#
# How: k8s.io/kubernetes requires its ~33 staging modules (k8s.io/api, k8s.io/apiserver, ...) at the
# non-existent v0.0.0 and points them at ./staging with replace directives, which do not apply when it is
# a dependency. So a generated wrapper module requires k8s.io/kubernetes and replaces each staging module,
# read from that release's own go.mod, with its published release (v1.X.Y -> v0.X.Y).
set -euo pipefail

K8S_VERSION="${SPECPILOT_K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${SPECPILOT_ETCD_VERSION:-v3.6.16}"
ETCD_REPLACE="${SPECPILOT_ETCD_REPLACE:-auto}"
NICE="${SPECPILOT_BUILD_NICE:-10}"
CACHE="${SPECPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specpilot}"
CP_DIR="$CACHE/control-plane/$K8S_VERSION"
BIN="$CP_DIR/bin"
# Bump when the recipe below changes, so cached binaries are rebuilt.
RECIPE=1
K8S_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler)
COMPONENTS=("${K8S_COMPONENTS[@]}" etcd)
# The upstream CRDs of what the operator and the chart write besides core objects, from their own modules,
# copied beside the binaries (bin/../crds/): Gateway API's HTTPRoute, the Prometheus Operator's monitors.
GATEWAY_API="sigs.k8s.io/gateway-api@${SPECPILOT_GATEWAY_API_VERSION:-v1.6.3}"
PROMETHEUS_OPERATOR="github.com/prometheus-operator/prometheus-operator@${SPECPILOT_PROMETHEUS_OPERATOR_VERSION:-v0.88.0}"
CRDS_DIR="$CP_DIR/crds"
CRDS_STAMP="$CRDS_DIR/.stamp"
CRD_FILES=("$GATEWAY_API config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"
           "$PROMETHEUS_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml"
           "$PROMETHEUS_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"
           "$PROMETHEUS_OPERATOR example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml")

build_key() {
  case "$1" in
    etcd) echo "recipe=$RECIPE etcd=$ETCD_VERSION" ;;
    *)
      if [[ "$ETCD_REPLACE" == always ]]; then
        echo "recipe=$RECIPE k8s=$K8S_VERSION etcd-replace=always/$ETCD_VERSION"
      else
        echo "recipe=$RECIPE k8s=$K8S_VERSION etcd-replace=$ETCD_REPLACE"
      fi ;;
  esac
}

is_built() {
  local stamp="$BIN/.$1.stamp"
  [[ -x "$BIN/$1" && -f "$stamp" && "$(<"$stamp")" == "$(build_key "$1")" ]]
}

all_built() {
  local c
  for c in "${COMPONENTS[@]}"; do is_built "$c" || return 1; done
  [[ -f "$CRDS_STAMP" && "$(<"$CRDS_STAMP")" == "$GATEWAY_API $PROMETHEUS_OPERATOR" ]]
}

# Fast path: nothing to do.
if all_built; then
  echo "$BIN"
  exit 0
fi

log() { echo "build-control-plane: $*" >&2; }

if [[ ! "$K8S_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)(-.*)?$ ]]; then
  log "SPECPILOT_K8S_VERSION must look like v1.36.3, got '$K8S_VERSION'"
  exit 2
fi
K8S_MINOR="${BASH_REMATCH[1]}"
STAGING_VERSION="v0.${K8S_MINOR}.${BASH_REMATCH[2]}${BASH_REMATCH[3]}"

mkdir -p "$BIN" "$CP_DIR/src"
# One build at a time per version (parallel test workers may all call this).
exec 9>"$CP_DIR/.lock"
if ! flock -n 9; then
  log "another build of $K8S_VERSION is running; waiting for it"
  flock 9
fi
if all_built; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }
export GOPATH="$CACHE/go"
export GOMODCACHE="$GOPATH/pkg/mod"
export GOCACHE="$CACHE/go-build"
export GOFLAGS="-mod=mod -modcacherw -buildvcs=false -trimpath"
export GOWORK=off
export GO111MODULE=on
export CGO_ENABLED=0

run_go() { nice -n "$NICE" go "$@" >&2; }

# Prints the value of "Key" from `go mod download -json` output on stdin.
json_field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" | head -1; }

# Prints "path version" for each requirement of a go.mod file.
requirements() {
  go mod edit -json "$1" | awk '
    /"Require": \[/ { inreq = 1; next }
    inreq && /^\t\]/ { inreq = 0 }
    inreq && /"Path":/ { gsub(/[",]/, "", $2); path = $2 }
    inreq && /"Version":/ { gsub(/[",]/, "", $2); print path, $2 }'
}

module_info() {
  (cd "$CP_DIR/src" && nice -n "$NICE" go mod download -json "$1")
}

build_one() {
  local name="$1" dir="$2" pkg="$3" ldflags="$4" minutes="$5" start
  is_built "$name" && return 0
  log "building $name (one-time, ~$minutes min)..."
  start=$SECONDS
  (cd "$dir" && nice -n "$NICE" go build -ldflags "$ldflags" -o "$BIN/.$name.tmp" "$pkg") >&2
  "$BIN/.$name.tmp" --version 2>&1 | head -1 | sed "s/^/build-control-plane: $name --version: /" >&2
  mv -f "$BIN/.$name.tmp" "$BIN/$name"
  build_key "$name" >"$BIN/.$name.stamp"
  log "built $name in $((SECONDS - start))s"
}

build_kubernetes() {
  local need=0 c
  for c in "${K8S_COMPONENTS[@]}"; do is_built "$c" || need=1; done
  ((need)) || return 0

  log "resolving k8s.io/kubernetes@$K8S_VERSION"
  local info gomod k8s_time
  info="$(module_info "k8s.io/kubernetes@$K8S_VERSION")" || {
    log "could not fetch k8s.io/kubernetes@$K8S_VERSION: $info"
    exit 1
  }
  gomod="$(json_field GoMod <<<"$info")"
  k8s_time="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "${gomod%.mod}.info")"

  local reqs staging etcd_mods
  reqs="$(requirements "$gomod")"
  staging="$(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 }' <<<"$reqs")"
  [[ -n "$staging" ]] || { log "no k8s.io/* v0.0.0 requirements in $gomod"; exit 1; }
  etcd_mods="$(awk '$1 ~ /^go\.etcd\.io\/etcd\// { print $1, $2 }' <<<"$reqs")"

  local pin_etcd=0 path version
  case "$ETCD_REPLACE" in
    always) pin_etcd=1 ;;
    never) ;;
    auto)
      while read -r path version; do
        [[ -n "$path" ]] || continue
        if ! module_info "$path@$version" >/dev/null 2>&1; then
          log "$path@$version is not served; pinning etcd modules to $ETCD_VERSION"
          pin_etcd=1
          break
        fi
      done <<<"$etcd_mods"
      ;;
    *) log "SPECPILOT_ETCD_REPLACE must be auto, always or never"; exit 2 ;;
  esac

  local dir="$CP_DIR/src/kubernetes"
  mkdir -p "$dir"
  {
    echo "// Generated by scripts/build-control-plane.sh; rewritten on every build."
    echo "module specpilot.local/control-plane/kubernetes"
    echo
    echo "go $(go mod edit -json "$gomod" | json_field Go)"
    # Kubernetes' own GODEBUG defaults only apply when it is the main module: copy them.
    go mod edit -json "$gomod" | awk '
      /"GoDebug": \[/ { in_ = 1; next }
      in_ && /^\t\]/ { in_ = 0 }
      in_ && /"Key":/ { gsub(/[",]/, "", $2); key = $2 }
      in_ && /"Value":/ { gsub(/[",]/, "", $2); print "godebug " key "=" $2 }'
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "tool ("
    for c in "${K8S_COMPONENTS[@]}"; do echo "	k8s.io/kubernetes/cmd/$c"; done
    echo ")"
    echo
    echo "// k8s.io/kubernetes requires its staging modules at v0.0.0: use the matching releases."
    echo "replace ("
    for path in $staging; do echo "	$path => $path $STAGING_VERSION"; done
    if ((pin_etcd)); then
      for path in api/v3 client/pkg/v3 client/v3 pkg/v3 server/v3; do
        echo "	go.etcd.io/etcd/$path => go.etcd.io/etcd/$path $ETCD_VERSION"
      done
    fi
    echo ")"
  } >"$dir/go.mod"
  log "wrapper module $dir: $(wc -w <<<"$staging") staging modules -> $STAGING_VERSION"

  log "downloading Kubernetes' dependencies"
  (cd "$dir" && run_go mod tidy)

  local v="k8s.io/component-base/version" cv="k8s.io/client-go/pkg/version" ldflags="-s -w" x
  for x in "$v" "$cv"; do
    ldflags+=" -X $x.gitVersion=$K8S_VERSION -X $x.gitMajor=1 -X $x.gitMinor=$K8S_MINOR"
    ldflags+=" -X $x.gitTreeState=clean -X $x.buildDate=$k8s_time"
  done
  build_one kube-apiserver "$dir" k8s.io/kubernetes/cmd/kube-apiserver "$ldflags" 8
  build_one kube-controller-manager "$dir" k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags" 2
  build_one kube-scheduler "$dir" k8s.io/kubernetes/cmd/kube-scheduler "$ldflags" 1
}

build_etcd() {
  is_built etcd && return 0
  local dir="$CP_DIR/src/etcd"
  mkdir -p "$dir"
  {
    echo "// Generated by scripts/build-control-plane.sh; rewritten on every build."
    echo "module specpilot.local/control-plane/etcd"
    echo
    echo "go $(go env GOVERSION | sed 's/^go\([0-9]*\.[0-9]*\).*/\1/').0"
    echo
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    echo
    echo "tool go.etcd.io/etcd/server/v3"
  } >"$dir/go.mod"
  log "downloading etcd's dependencies"
  (cd "$dir" && run_go mod tidy)
  build_one etcd "$dir" go.etcd.io/etcd/server/v3 \
    "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$ETCD_VERSION" 1
}

fetch_crds() {
  [[ -f "$CRDS_STAMP" && "$(<"$CRDS_STAMP")" == "$GATEWAY_API $PROMETHEUS_OPERATOR" ]] && return 0
  mkdir -p "$CRDS_DIR"
  local entry module file dir
  for entry in "${CRD_FILES[@]}"; do
    read -r module file <<<"$entry"
    dir="$(module_info "$module" | json_field Dir)"
    [[ -f "$dir/$file" ]] || { log "$module has no $file"; exit 1; }
    cp "$dir/$file" "$CRDS_DIR/"
  done
  echo "$GATEWAY_API $PROMETHEUS_OPERATOR" >"$CRDS_STAMP"
  log "upstream CRDs in $CRDS_DIR"
}

start=$SECONDS
fetch_crds
build_etcd
build_kubernetes
log "control plane $K8S_VERSION (etcd $ETCD_VERSION) ready in $BIN after $((SECONDS - start))s"
echo "$BIN"
