#!/usr/bin/env bash
# The control of tests/k8s/explain-check.py: the McpKey CRD applied with one field's description
# removed (spec.limits.burst) must make the check fail naming that field; the real CRD is applied
# back whatever happens. Exit 0 only when the check failed as it should.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
crd="$root/crds/switchboard.dev_mcpkeys.yaml"
restore() { kubectl apply --server-side --force-conflicts -f "$crd" >/dev/null; }
trap restore EXIT
python3 - "$crd" <<'PY' | kubectl apply --server-side --force-conflicts -f - >/dev/null || exit 2
import sys, yaml
crd = yaml.safe_load(open(sys.argv[1]))
limits = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["limits"]
del limits["properties"]["burst"]["description"]
print(yaml.safe_dump(crd))
PY
# kubectl caches the OpenAPI it explains from; the new schema is read once it is served.
for _ in $(seq 1 40); do
  out=$(python3 "$root/tests/k8s/explain-check.py" mcpkey 2>&1) && { sleep 0.25; continue; }
  echo "$out"
  grep -q "mcpkey.spec.limits.burst" <<<"$out" && exit 0
  exit 1
done
echo "the check still passed 10 s after the description was removed"
exit 1
