#!/usr/bin/env bash
# Installs Helm into .cache/bin/helm from the Go module proxy (idempotent).
#
#   bash tests/chart/install_helm.sh          # builds once; later runs are a no-op
#   HELM_VERSION=v3.22.0 bash tests/chart/install_helm.sh
#
# Helm v3.22.0's go.mod has no replace directives, so a plain `go install pkg@version` works.
# Should a future version add some, `go install` refuses it; the fallback builds Helm as a
# dependency of a throwaway module instead (same binary, same version).
set -euo pipefail
cd "$(dirname "$0")/../.."

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
BIN_DIR="$PWD/.cache/bin"
HELM="$BIN_DIR/helm"
export PATH="$HOME/go/bin:/usr/local/go/bin:$PATH"

if [[ -x "$HELM" ]] && "$HELM" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  echo "helm $HELM_VERSION already at $HELM"
  exit 0
fi

command -v go >/dev/null || { echo "install_helm.sh: Go is required (go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION)" >&2; exit 1; }
mkdir -p "$BIN_DIR"
# -trimpath/-ldflags keep the binary small; the version string comes from the module itself.
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
echo "building helm $HELM_VERSION into $HELM (takes a few minutes the first time)"
start=$(date +%s)
if ! GOBIN="$BIN_DIR" GOFLAGS="${GOFLAGS:-} -buildvcs=false" go install -trimpath -ldflags "$LDFLAGS" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"; then
  echo "go install failed; building helm as a dependency of a scratch module" >&2
  work="$PWD/.cache/helm-build"
  rm -rf "$work" && mkdir -p "$work"
  (
    cd "$work"
    go mod init vramgate.local/helmbuild >/dev/null 2>&1
    printf 'package tools\n\nimport _ "helm.sh/helm/v3/cmd/helm"\n' > tools.go
    go get "helm.sh/helm/v3@$HELM_VERSION"
    go mod tidy
    go build -trimpath -ldflags "$LDFLAGS" -o "$HELM" helm.sh/helm/v3/cmd/helm
  )
fi
"$HELM" version --short
echo "helm built in $(( $(date +%s) - start ))s"
