#!/usr/bin/env bash
# Build kwok for `make bench-cluster` from the sigs.k8s.io/kwok module pinned in
# bench/cluster/kwok/go.mod (the Go module proxy, like tests/e2e/build.sh), and assemble the
# Stage definitions that ship in that module (kustomize/stage/node/fast, pod/fast) into one
# kwok --config file.
#
# Idempotent. Output:  .cache/kwok/<version>/bin/kwok  and  .cache/kwok/<version>/stages.yaml
# Options:  --force   rebuild      --print-dir   print the output dir and exit
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
mod="$here/kwok"
# shellcheck source=tests/e2e/gobuild.sh
source "$root/tests/e2e/gobuild.sh"
version="$(mod_version "$mod/go.mod" sigs.k8s.io/kwok)"
[[ -n "$version" ]] || { echo "build_kwok.sh: cannot read the pinned kwok version" >&2; exit 1; }
out="$root/.cache/kwok/$version"
build_options build_kwok.sh "$out" 8 "$@"
go_env build_kwok.sh
mkdir -p "$out/bin"

if [[ $force == 1 || ! -x "$out/bin/kwok" ]]; then
  echo "build_kwok.sh: building kwok $version ..."
  t0=$(date +%s)
  (cd "$mod" && go build -p "${E2E_GO_PARALLEL:-2}" -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${version#v}" \
    -o "$out/bin/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok)
  mv -f "$out/bin/kwok.tmp" "$out/bin/kwok"
  echo "build_kwok.sh: kwok built in $(( $(date +%s) - t0 ))s"
else
  echo "build_kwok.sh: kwok present"
fi

if [[ $force == 1 || ! -s "$out/stages.yaml" ]]; then
  src="$(cd "$mod" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  {
    for f in "$src"/kustomize/stage/node/fast/*.yaml "$src"/kustomize/stage/pod/fast/*.yaml; do
      [[ "$(basename "$f")" == kustomization.yaml ]] && continue
      echo "---"
      echo "# from sigs.k8s.io/kwok@$version/${f#"$src"/}"
      cat "$f"
    done
  } > "$out/stages.yaml.tmp"
  mv -f "$out/stages.yaml.tmp" "$out/stages.yaml"
  echo "build_kwok.sh: stages from $src/kustomize/stage/{node,pod}/fast -> $out/stages.yaml"
fi
"$out/bin/kwok" --version 2>/dev/null | head -1 || true
