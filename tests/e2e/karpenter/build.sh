#!/usr/bin/env bash
# Build Karpenter's KWOK provider (sigs.k8s.io/karpenter/kwok) from the module pinned in
# tests/e2e/karpenter/go.mod (the Go module proxy), and copy the CRDs that ship in that module
# (NodePool, NodeClaim, KWOKNodeClass) beside it, for tests/e2e/test_karpenter.py.
#
# The module needs Go >= 1.26.9: the go command fetches the approved toolchain go1.27.3 from the
# module proxy (GOTOOLCHAIN below; about 76 MB, once per machine).
#
# Idempotent. Output:  .cache/karpenter/<version>/bin/karpenter-kwok  and  .cache/karpenter/<version>/crds/
# Options:  --force   rebuild      --print-dir   print the output dir and exit
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
# shellcheck source=tests/e2e/gobuild.sh
source "$here/../gobuild.sh"
version="$(mod_version "$here/go.mod" sigs.k8s.io/karpenter)"
[[ -n "$version" ]] || { echo "karpenter/build.sh: cannot read the pinned karpenter version" >&2; exit 1; }
out="$root/.cache/karpenter/$version"
build_options karpenter/build.sh "$out" 10 "$@"
go_env karpenter/build.sh
export GOTOOLCHAIN="${KARPENTER_GOTOOLCHAIN:-go1.27.3}"
mkdir -p "$out/bin" "$out/crds"

if [[ $force == 1 || ! -x "$out/bin/karpenter-kwok" ]]; then
  echo "karpenter/build.sh: building karpenter $version (KWOK provider) with $GOTOOLCHAIN ..."
  t0=$(date +%s)
  (cd "$here" && go build -p "${E2E_GO_PARALLEL:-2}" -ldflags "-s -w" -o "$out/bin/karpenter-kwok.tmp" sigs.k8s.io/karpenter/kwok)
  mv -f "$out/bin/karpenter-kwok.tmp" "$out/bin/karpenter-kwok"
  echo "karpenter/build.sh: built in $(( $(date +%s) - t0 ))s"
else
  echo "karpenter/build.sh: karpenter $version present in $out"
fi

src="$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
[[ -d "$src" ]] || { echo "karpenter/build.sh: module source of sigs.k8s.io/karpenter not found" >&2; exit 1; }
for f in kwok/charts/crds/karpenter.sh_nodepools.yaml kwok/charts/crds/karpenter.sh_nodeclaims.yaml \
         kwok/apis/crds/karpenter.kwok.sh_kwoknodeclasses.yaml; do
  install -m 0644 "$src/$f" "$out/crds/$(basename "$f")"
done
