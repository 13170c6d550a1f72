#!/usr/bin/env bash
# Build the e2e control-plane binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet, kube-proxy, etcd, crictl) from the upstream Go modules pinned in
# tests/e2e/k8s/go.mod and tests/e2e/etcd/go.mod.
#
# Idempotent: only missing binaries are built. Output goes to
#   .cache/k8s/<kube-version>/bin/   (override with VRAMGATE_E2E_BIN)
# Options:  --force   rebuild everything      --print-dir   print the bin dir and exit
# Env:      E2E_GO_PARALLEL (default 2) is passed to `go build -p`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

# shellcheck source=tests/e2e/gobuild.sh
source "$here/gobuild.sh"
KUBE_VERSION="$(mod_version "$here/k8s/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(mod_version "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)"
[[ -n "$KUBE_VERSION" && -n "$ETCD_VERSION" ]] || { echo "build.sh: cannot read pinned versions" >&2; exit 1; }

bin_dir="${VRAMGATE_E2E_BIN:-$root/.cache/k8s/$KUBE_VERSION/bin}"
build_options build.sh "$bin_dir" 11 "$@"
go_env build.sh "Go >= 1.26 needed"
par="${E2E_GO_PARALLEL:-2}"
mkdir -p "$bin_dir"

now() { date +%s; }
t_all=$(now)
echo "build.sh: kubernetes $KUBE_VERSION, etcd $ETCD_VERSION -> $bin_dir ($(go version | awk '{print $3}'), -p $par)"

# ---- Kubernetes -------------------------------------------------------------
k8s_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
missing=()
for b in "${k8s_cmds[@]}"; do
  if [[ $force == 1 || ! -x "$bin_dir/$b" ]]; then missing+=("$b"); fi
done
if ((${#missing[@]})); then
  ver="${KUBE_VERSION#v}"; major="${ver%%.*}"; rest="${ver#*.}"; minor="${rest%%.*}"
  # Stamp the release date of the pinned module, so that builds are reproducible.
  build_date="$(cd "$here/k8s" && go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)"
  [[ -n "$build_date" ]] || build_date="1970-01-01T00:00:00Z"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
  done
  pkgs=(); for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  tmp="$(mktemp -d "$bin_dir/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "build.sh: building ${missing[*]} ..."
  t0=$(now)
  (cd "$here/k8s" && go build -p "$par" -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
  for b in "${missing[@]}"; do mv -f "$tmp/$b" "$bin_dir/$b"; done
  rm -rf "$tmp"; trap - EXIT
  echo "build.sh: kubernetes binaries built in $(( $(now) - t0 ))s"
else
  echo "build.sh: kubernetes binaries present, nothing to do"
fi

# ---- crictl (the real-node suite removes its pods through the CRI) --------------------------
CRICTL_VERSION=v1.37.0
if [[ $force == 1 || ! -x "$bin_dir/crictl" ]]; then
  echo "build.sh: building crictl $CRICTL_VERSION ..."
  t0=$(now)
  GOBIN="$bin_dir" go install -ldflags "-s -w" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  echo "build.sh: crictl built in $(( $(now) - t0 ))s"
else
  echo "build.sh: crictl present, nothing to do"
fi

# ---- etcd -------------------------------------------------------------------
if [[ $force == 1 || ! -x "$bin_dir/etcd" ]]; then
  echo "build.sh: building etcd ..."
  t0=$(now)
  (cd "$here/etcd" && go build -p "$par" -ldflags "-s -w" -o "$bin_dir/etcd.tmp" .)
  mv -f "$bin_dir/etcd.tmp" "$bin_dir/etcd"
  echo "build.sh: etcd built in $(( $(now) - t0 ))s"
else
  echo "build.sh: etcd present, nothing to do"
fi

for b in "${k8s_cmds[@]}" etcd; do
  [[ -x "$bin_dir/$b" ]] || { echo "build.sh: $bin_dir/$b missing after build" >&2; exit 1; }
done
"$bin_dir/kube-apiserver" --version
# sed, not head: head exits after one line and etcd, still writing, dies of SIGPIPE (141 under pipefail).
"$bin_dir/etcd" --version | sed -n 1p
echo "build.sh: done in $(( $(now) - t_all ))s"
