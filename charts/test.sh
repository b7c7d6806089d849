#!/usr/bin/env bash
# Chart checks: helm lint, template rendering (defaults, and all options on), promtool on the
# rendered alerts, the Argo CD health check in Lua. Installs its tools first (charts/install-tools.sh).
set -euo pipefail
cd "$(dirname "$0")"
bash install-tools.sh >/dev/null
HELM="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/tools/helm"
CHART=pseudoflow-operator
ALL=(--set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.dashboard.enabled=true --set executorExample.enabled=true --set-json 'watchNamespaces=["a","b"]' --set-json 'nodeSteps.namespaces=["node-ops","infra"]' --set admissionPolicy.enabled=true --set-json 'admissionPolicy.serviceAccounts=["flow","kube-system/node-ops"]' --set-json 'admissionPolicy.namespaceSelector={"matchLabels":{"tenant":"yes"}}' --set-json 'executor={"priorityClassName":"ops-high","imagePullSecrets":[{"name":"regcred"}]}' --set history.successfulRuns=5)
"$HELM" lint "$CHART" "${ALL[@]}"
out="$(mktemp -d)"
"$HELM" template pf "$CHART" --namespace pseudoflow-system "${ALL[@]}" > "$out/all.yaml"
"$HELM" template pf "$CHART" --namespace pseudoflow-system > "$out/defaults.yaml"
"$HELM" template pf "$CHART" --namespace pseudoflow-system --set-json 'nodeSteps.namespaces=[]' > "$out/no-node-steps.yaml"
"$HELM" template pf "$CHART" --namespace pseudoflow-system --set webhook.certManager.enabled=true > "$out/cert-manager.yaml"
python3 - "$out/cert-manager.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = {d["kind"] for d in docs}
assert {"Certificate", "Issuer", "ValidatingWebhookConfiguration"} <= kinds, kinds
vwc = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "pseudoflow-system/pf-pseudoflow-webhook", vwc
dep = next(d for d in docs if d["kind"] == "Deployment")
assert "--webhook-cert-dir=/tls" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
role = next(d for d in docs if d["kind"] == "ClusterRole")
assert not any("validatingwebhookconfigurations" in r["resources"] or "mutatingwebhookconfigurations" in r["resources"] for r in role["rules"]), "cert-manager injects the CA"
PY
# The admission policy refuses to render without an allowed ServiceAccount (it would refuse every flow).
if "$HELM" template pf "$CHART" --set admissionPolicy.enabled=true > /dev/null 2> "$out/err"; then
  echo "admissionPolicy.enabled without serviceAccounts must fail to render" >&2; exit 1
fi
grep -q "admissionPolicy.serviceAccounts must name at least one" "$out/err"
python3 - "$out/defaults.yaml" "$out/no-node-steps.yaml" <<'PY'
import sys, yaml
def load(p): return [d for d in yaml.safe_load_all(open(p)) if d]
def args(docs): return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
defaults = load(sys.argv[1])
# Node steps: kube-system only by default (it must also be labelled enforce=privileged).
assert "--node-step-namespaces=kube-system" in args(defaults), args(defaults)
assert not any(d["kind"].startswith("ValidatingAdmissionPolicy") for d in defaults), "the admission policy is opt-in"
assert not any(a.startswith("--node-step-namespaces") for a in args(load(sys.argv[2]))), "[] = no flag, node steps nowhere"
PY
python3 - "$out/all.yaml" tests/rendered-rules.yaml <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted({d["kind"] for d in docs})
want = {"ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"}
missing = want - set(kinds)
assert not missing, f"rendered chart lacks {missing}"
dep = next(d for d in docs if d["kind"] == "Deployment")
args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
assert "--image=ghcr.io/example/pseudoflow-runtime:0.1.0" in args, args
assert "--namespace=a" in args and "--namespace=b" in args, args
assert "--node-step-namespaces=node-ops,infra" in args, args
# The webhook: its own CA by default, written into its own configuration only.
assert "--webhook-addr=0.0.0.0:9443" in args, args
assert "--webhook-cert-names=pf-pseudoflow-webhook.pseudoflow-system.svc,pf-pseudoflow-webhook.pseudoflow-system.svc.cluster.local" in args, args
assert "--webhook-configuration=pf-pseudoflow" in args, args
c = dep["spec"]["template"]["spec"]["containers"][0]
assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", c
assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", c
vwc = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
hook = vwc["webhooks"][0]
assert hook["failurePolicy"] == "Fail", hook
assert hook["rules"][0]["resources"] == ["pseudoflows"], hook
assert sorted(hook["rules"][0]["operations"]) == ["CREATE", "UPDATE"], hook
assert hook["clientConfig"]["service"] == {"name": "pf-pseudoflow-webhook", "namespace": "pseudoflow-system", "path": "/validate", "port": 443}, hook
assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["a", "b"], hook
role = next(d for d in docs if d["kind"] == "ClusterRole")
# Both configurations (validating, and mutating for approval stamps) carry its CA.
vwc_rule = next(r for r in role["rules"] if "validatingwebhookconfigurations" in r["resources"])
assert sorted(vwc_rule["resources"]) == ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"], vwc_rule
assert vwc_rule["resourceNames"] == ["pf-pseudoflow"] and vwc_rule["verbs"] == ["get", "patch"], vwc_rule
mwc = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")
assert mwc["webhooks"][0]["clientConfig"]["service"]["path"] == "/mutate", mwc
policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
assert binding["spec"]["policyName"] == policy["metadata"]["name"], binding
assert binding["spec"]["validationActions"] == ["Deny"], binding
assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchLabels": {"tenant": "yes"}}, binding
allowed = next(v for v in policy["spec"]["variables"] if v["name"] == "allowed")["expression"]
assert allowed == '["flow","kube-system/node-ops"]', allowed
assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["pseudoflows"], policy
rule = next(d for d in docs if d["kind"] == "PrometheusRule")
yaml.safe_dump({"groups": rule["spec"]["groups"]}, open(sys.argv[2], "w"))
print(f"rendered {len(docs)} objects: {', '.join(kinds)}")
PY
promtool check rules tests/rendered-rules.yaml
promtool test rules tests/alerts_test.yaml
lua5.4 tests/health_test.lua "$CHART/argocd/health.lua"
rm -f tests/rendered-rules.yaml
