#!/usr/bin/env bash
# Build the images the real-node e2e suite runs, with no registry: every image is made here.
#
#   python base   Debian bookworm's python3 (mmdebstrap, Debian packages only), in place of the
#                 Dockerfile's default python:3.11-slim base — the one difference from a registry build
#   vramgate      the repository's Dockerfile as written, built by buildah with
#                 --build-arg PYTHON_IMAGE=<the base above>
#   kube-scheduler  scratch + the static kube-scheduler from tests/e2e/build.sh, named as the chart's
#                 default (registry.k8s.io/kube-scheduler:<pinned version>) so the chart runs unchanged
#   pause         scratch + tests/e2e/node/pause.c, built static: containerd's sandbox image
#
# Output: docker archives under .cache/images/ (import them with `ctr images import`), and
# .cache/images/images.env naming each image. Each image is rebuilt only when its inputs change.
# buildah keeps its storage in .cache/images/storage, never in the host's /var/lib/containers.
# pip inside the build uses the host's pip configuration and CA bundle, mounted read-only for the
# build only (never baked into the image).
# Options: --force  rebuild everything.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="${VRAMGATE_E2E_IMAGES:-$root/.cache/images}"
force=0
[[ "${1:-}" == "--force" ]] && force=1
for tool in mmdebstrap buildah gcc; do
  command -v "$tool" >/dev/null || { echo "build_images.sh: '$tool' not found (apt-get install mmdebstrap buildah gcc libc6-dev; make node-deps does it)" >&2; exit 1; }
done
bin_dir="$(bash "$root/tests/e2e/build.sh" --print-dir)"
[[ -x "$bin_dir/kube-scheduler" ]] || { echo "build_images.sh: $bin_dir/kube-scheduler missing: run bash tests/e2e/build.sh" >&2; exit 1; }
kube_version="$("$bin_dir/kube-scheduler" --version | awk '{print $2}')"
mkdir -p "$out"
B=(buildah --root "$out/storage" --runroot "$out/run" --storage-driver overlay)
now() { date +%s; }
key_of() { cat "$@" | sha256sum | cut -c1-16; }
fresh() { # fresh <name> <key>: the archive exists and was built from these inputs
  [[ $force == 0 && -f "$out/$1.tar" && "$(cat "$out/$1.key" 2>/dev/null)" == "$2" ]]
}
save() { # save <name> <ref> <key>: write the docker archive and its key
  rm -f "$out/$1.tar.tmp"
  "${B[@]}" push -q "$2" "docker-archive:$out/$1.tar.tmp:$2" >/dev/null
  mv -f "$out/$1.tar.tmp" "$out/$1.tar"
  echo "$3" > "$out/$1.key"
}
from_scratch() { # from_scratch <ref> <file> <path in image> [buildah config args...]
  local ref="$1" file="$2" dest="$3"; shift 3
  local c; c="$("${B[@]}" from scratch)"
  "${B[@]}" copy --chmod 0755 "$c" "$file" "$dest" >/dev/null
  "${B[@]}" config "$@" "$c"
  "${B[@]}" commit -q --rm "$c" "$ref" >/dev/null
}
t_all=$(now)

# ---- pause ----------------------------------------------------------------------------------------
PAUSE_REF=localhost/vramgate-e2e/pause:1
k="$(key_of "$here/pause.c" "$0")"
if ! fresh pause "$k"; then
  t0=$(now); tmp="$(mktemp -d)"
  gcc -static -O2 -s -o "$tmp/pause" "$here/pause.c"
  from_scratch "$PAUSE_REF" "$tmp/pause" /pause --entrypoint '["/pause"]' --user 65535:65535
  rm -rf "$tmp"; save pause "$PAUSE_REF" "$k"
  echo "build_images.sh: pause built in $(( $(now) - t0 ))s"
fi

# ---- kube-scheduler -------------------------------------------------------------------------------
SCHED_REF="registry.k8s.io/kube-scheduler:$kube_version"
k="$(key_of "$bin_dir/kube-scheduler" "$0")"
if ! fresh kube-scheduler "$k"; then
  t0=$(now)
  from_scratch "$SCHED_REF" "$bin_dir/kube-scheduler" /usr/local/bin/kube-scheduler \
    --env PATH=/usr/local/bin --entrypoint '["/usr/local/bin/kube-scheduler"]' --user 65532:65532
  save kube-scheduler "$SCHED_REF" "$k"
  echo "build_images.sh: kube-scheduler image built in $(( $(now) - t0 ))s"
fi

# ---- python base (Debian packages) ----------------------------------------------------------------
BASE_REF=localhost/vramgate-e2e/python:3.11-bookworm
k="$(echo "bookworm python3 python3-venv python-is-python3 ca-certificates" | key_of - "$0")"
if [[ $force == 1 || "$(cat "$out/python-base.key" 2>/dev/null)" != "$k" ]] || ! "${B[@]}" inspect -t image "$BASE_REF" >/dev/null 2>&1; then
  t0=$(now)
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    bookworm "$out/python-base.tar" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
  c="$("${B[@]}" from scratch)"
  "${B[@]}" add "$c" "$out/python-base.tar" / >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd '["python3"]' "$c"
  "${B[@]}" commit -q --rm "$c" "$BASE_REF" >/dev/null
  rm -f "$out/python-base.tar"
  echo "$k" > "$out/python-base.key"
  echo "build_images.sh: python base built in $(( $(now) - t0 ))s"
fi

# ---- vramgate (the repository's Dockerfile) -------------------------------------------------------
VRAMGATE_REF=localhost/vramgate:e2e
k="$(cd "$root" && { cat "$out/python-base.key" "$0"; find Dockerfile pyproject.toml README.md webhook -type f ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum; } | key_of -)"
if ! fresh vramgate "$k"; then
  t0=$(now)
  mounts=()
  for f in /etc/pip.conf /etc/ssl/certs/ca-certificates.crt; do
    [[ -f "$f" ]] && mounts+=(-v "$f:$f:ro")
  done
  "${B[@]}" build -q --isolation chroot --network host --layers \
    --build-arg "PYTHON_IMAGE=$BASE_REF" "${mounts[@]}" -t "$VRAMGATE_REF" -f "$root/Dockerfile" "$root" >/dev/null
  save vramgate "$VRAMGATE_REF" "$k"
  echo "build_images.sh: vramgate image built in $(( $(now) - t0 ))s"
fi

"${B[@]}" rmi --prune >/dev/null 2>&1 || true  # earlier builds' untagged layers

cat > "$out/images.env" <<ENV
PAUSE_REF=$PAUSE_REF
SCHEDULER_REF=$SCHED_REF
VRAMGATE_REF=$VRAMGATE_REF
ENV
echo "build_images.sh: images in $out ($(( $(now) - t_all ))s)"
