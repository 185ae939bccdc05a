#!/usr/bin/env bash
# The release workflow and the chart package, checked without GitHub (issue 25, item 7).
#
#   tests/run-all.sh 20-release       (or: bash tests/suites.d/20-release.sh)
#
# 1. actionlint (built once from the Go module proxy by tests/setup-go-tool.sh actionlint) passes every
#    workflow under .github/workflows, and fails on a planted mistake (proof it reads them).
# 2. The release workflow signs each image and the chart keyless (cosign, id-token), attaches
#    provenance and an SBOM, and pushes the chart to an OCI registry.
# 3. `helm package` makes the chart's archive (helm from tests/k8s/build-binaries.sh), which holds
#    the CRDs and the Chart.yaml version, and `helm lint` passes on the archive.
# Ends with "N passed, N failed"; exits non-zero if anything failed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# shellcheck source=tests/check-helpers.bash
source tests/check-helpers.bash
workflow=.github/workflows/release.yml
chart=charts/switchboard

actionlint="$(tests/setup-go-tool.sh actionlint)" || { echo "tests/setup-go-tool.sh actionlint failed"; echo "0 passed, 1 failed"; exit 1; }
tests/k8s/build-binaries.sh >&2 || { echo "tests/k8s/build-binaries.sh failed (helm)"; echo "0 passed, 1 failed"; exit 1; }
helm="$(tests/k8s/build-binaries.sh --bin-dir)/helm"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-release.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# ---- 1. actionlint ------------------------------------------------------------------------
check "actionlint passes .github/workflows/*.yml" "$actionlint" .github/workflows/*.yml
sed 's/runs-on: ubuntu-24.04$/runs-on: ubuntu-24.04\n    needs: no-such-job/' "$workflow" >"$scratch/broken.yml"
check_fails "actionlint fails a planted mistake (a job that needs a job that does not exist)" \
  'no-such-job' "$actionlint" "$scratch/broken.yml"

# ---- 2. what the release publishes ----------------------------------------------------------
check "images and chart are signed keyless by digest (cosign, id-token: write)" bash -c "
  grep -q 'id-token: write' $workflow &&
  [ \$(grep -c 'cosign sign --yes' $workflow) -ge 2 ] &&
  grep -q 'steps.build.outputs.digest' $workflow && grep -q 'steps.push.outputs.digest' $workflow"
check "images carry provenance and an SBOM; the chart provenance" bash -c "
  grep -q 'provenance: mode=max' $workflow && grep -q 'sbom: true' $workflow &&
  [ \$(grep -c 'actions/attest-build-provenance' $workflow) -ge 2 ]"
check "the chart is packaged and pushed to an OCI registry" bash -c "
  grep -q 'helm package charts/switchboard' $workflow && grep -q 'helm push .* oci://ghcr.io/switchboard-dev/charts' $workflow"

# ---- 3. helm package ------------------------------------------------------------------------
version=$(sed -n 's/^version: *//p' $chart/Chart.yaml)
check "helm package makes switchboard-$version.tgz" "$helm" package "$chart" --destination "$scratch"
check "the archive holds Chart.yaml, the CRDs and the templates" bash -c "
  tar -tzf $scratch/switchboard-$version.tgz >$scratch/list &&
  grep -q '^switchboard/Chart.yaml$' $scratch/list &&
  [ \$(grep -c '^switchboard/crds/.*\\.yaml$' $scratch/list) -eq \$(ls crds/*.yaml | wc -l) ] &&
  grep -q '^switchboard/templates/operator-deployment.yaml$' $scratch/list"
check "helm lint --strict passes on the archive" "$helm" lint --strict "$scratch/switchboard-$version.tgz"

echo "$passed passed, $failed failed"
((failed == 0))
