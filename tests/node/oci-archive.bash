# shellcheck shell=bash
# oci_archive NAME ARCHIVE CONTEXT: builds CONTEXT/Containerfile with buildah as image NAME and
# writes it to ARCHIVE as an OCI archive (for `ctr images import`), atomically: a half-written
# archive never looks cached. Sourced by tests/node/test-images.sh and stdio-images.sh, which
# define `die`.
oci_archive() {
  buildah build --quiet --layers=false -f "$3/Containerfile" -t "$1" "$3" >/dev/null || die "buildah could not build $1"
  rm -f "$2.tmp"
  buildah push --quiet "$1" "oci-archive:$2.tmp:$1" || die "buildah push of $1 failed"
  mv "$2.tmp" "$2"
}
