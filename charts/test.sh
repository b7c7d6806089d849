#!/usr/bin/env bash
# Chart checks: helm lint, template rendering (all options on), promtool on the rendered alerts,
# the Argo CD health check in Lua. Installs its tools first (charts/install-tools.sh).
set -euo pipefail
cd "$(dirname "$0")"
bash install-tools.sh >/dev/null
HELM="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/tools/helm"
CHART=pseudoflow-operator
ALL=(--set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.dashboard.enabled=true --set executorExample.enabled=true --set-json 'watchNamespaces=["a","b"]')
"$HELM" lint "$CHART" "${ALL[@]}"
out="$(mktemp -d)"
"$HELM" template pf "$CHART" --namespace pseudoflow-system "${ALL[@]}" > "$out/all.yaml"
python3 - "$out/all.yaml" tests/rendered-rules.yaml <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted({d["kind"] for d in docs})
want = {"ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor"}
missing = want - set(kinds)
assert not missing, f"rendered chart lacks {missing}"
dep = next(d for d in docs if d["kind"] == "Deployment")
args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
assert "--image=ghcr.io/example/pseudoflow-runtime:0.1.0" in args, args
assert "--namespace=a" in args and "--namespace=b" in args, args
rule = next(d for d in docs if d["kind"] == "PrometheusRule")
yaml.safe_dump({"groups": rule["spec"]["groups"]}, open(sys.argv[2], "w"))
print(f"rendered {len(docs)} objects: {', '.join(kinds)}")
PY
promtool check rules tests/rendered-rules.yaml
promtool test rules tests/alerts_test.yaml
lua5.4 tests/health_test.lua "$CHART/argocd/health.lua"
rm -f tests/rendered-rules.yaml
