# Sourced by the scripts that build Go binaries from pinned modules (tests/e2e/build.sh,
# tests/e2e/karpenter/build.sh, bench/cluster/build_kwok.sh): the pinned version of a module, their
# common options, and the Go environment they build in.

mod_version() { # mod_version <go.mod> <module path>: the version it requires (a require line or block)
  awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}

build_options() { # build_options <script name> <output dir> <last help line> "$@": sets force; may exit
  local name=$1 out=$2 help=$3 arg
  shift 3
  force=0
  for arg in "$@"; do
    case "$arg" in
      --force) force=1 ;;
      --print-dir) echo "$out"; exit 0 ;;
      -h|--help) sed -n "2,${help}p" "$0"; exit 0 ;;
      *) echo "$name: unknown argument $arg" >&2; exit 2 ;;
    esac
  done
}

go_env() { # go_env <script name> [what go must be]: a static, path-free build, or exit when go is missing
  command -v go >/dev/null || { echo "$1: 'go' not found on PATH${2:+ ($2)}" >&2; exit 1; }
  export CGO_ENABLED=0
  export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
}
