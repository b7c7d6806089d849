#!/usr/bin/env bash
# Chart checks: helm lint, template rendering (defaults, and all options on), promtool on the
# rendered alerts, the Argo CD health check and resource actions in Lua (and their argocd-cm snippet in
# docs/gitops.md). Installs its tools first (charts/install-tools.sh).
set -euo pipefail
cd "$(dirname "$0")"
bash install-tools.sh >/dev/null
HELM="${XDG_CACHE_HOME:-$HOME/.cache}/pseudoflow/tools/helm"
CHART=pseudoflow-operator
# The Prometheus Operator's kinds render only where the cluster serves them (helm template: --api-versions).
PROM=(--api-versions monitoring.coreos.com/v1/ServiceMonitor --api-versions monitoring.coreos.com/v1/PrometheusRule)
ALL=(--set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.dashboard.enabled=true --set executorExample.enabled=true --set-json 'watchNamespaces=["a","b"]' --set-json 'nodeSteps.namespaces=["node-ops","infra"]' --set admissionPolicy.enabled=true --set-json 'admissionPolicy.serviceAccounts=["flow","kube-system/node-ops"]' --set-json 'admissionPolicy.namespaceSelector={"matchLabels":{"tenant":"yes"}}' --set-json 'executor={"priorityClassName":"ops-high","imagePullSecrets":[{"name":"regcred"}]}' --set history.successfulRuns=5)
"$HELM" lint "$CHART" "${ALL[@]}"
out="$(mktemp -d)"
"$HELM" template pf "$CHART" --namespace pseudoflow-system "${PROM[@]}" "${ALL[@]}" > "$out/all.yaml"
"$HELM" template pf "$CHART" --namespace pseudoflow-system > "$out/defaults.yaml"
# On a cluster without the Prometheus Operator: both switches on, no capability.
"$HELM" template pf "$CHART" --namespace pseudoflow-system --set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true > "$out/no-prometheus.yaml"
"$HELM" template pf "$CHART" --namespace pseudoflow-system --set crds.keep=false > "$out/no-keep.yaml"
python3 - "$out/defaults.yaml" "$out/no-prometheus.yaml" "$out/no-keep.yaml" "$out/all.yaml" <<'PY'
import sys, yaml
def load(p): return [d for d in yaml.safe_load_all(open(p)) if d]
def crd(docs): return next(d for d in docs if d["kind"] == "CustomResourceDefinition")
defaults, no_prom, no_keep, all_on = (load(p) for p in sys.argv[1:5])
# The CRD survives helm uninstall by default (crds.keep), and only then.
assert crd(defaults)["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}, crd(defaults)["metadata"]
assert "annotations" not in crd(no_keep)["metadata"], crd(no_keep)["metadata"]
# Without the Prometheus Operator's CRDs the chart still renders, without its kinds.
kinds = {d["kind"] for d in no_prom}
assert not kinds & {"ServiceMonitor", "PrometheusRule"}, kinds
assert "Deployment" in kinds and "CustomResourceDefinition" in kinds, kinds
assert {"ServiceMonitor", "PrometheusRule"} <= {d["kind"] for d in all_on}, "rendered where the cluster serves them"
PY
"$HELM" template pf "$CHART" --namespace pseudoflow-system --set-json 'nodeSteps.namespaces=[]' > "$out/no-node-steps.yaml"
"$HELM" template pf "$CHART" --namespace pseudoflow-system --set webhook.certManager.enabled=true > "$out/cert-manager.yaml"
"$HELM" template pf "$CHART" --namespace pseudoflow-system --set networkPolicy.enabled=false --set webhook.clientAuth.unauthenticatedApprovals=true > "$out/no-policy.yaml"
printf -- '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n' > "$out/client-ca.crt"
"$HELM" template pf "$CHART" --namespace pseudoflow-system --set webhook.certManager.enabled=true --set-file webhook.clientAuth.caBundle="$out/client-ca.crt" --set-json 'networkPolicy.webhookFrom=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]' --set-json 'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"name":"monitoring"}}}]' > "$out/client-auth.yaml"
python3 - "$out/defaults.yaml" "$out/no-policy.yaml" "$out/client-auth.yaml" <<'PY'
import sys, yaml
def load(p): return [d for d in yaml.safe_load_all(open(p)) if d]
def one(docs, kind): return next(d for d in docs if d["kind"] == kind)
def container(docs): return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
defaults, no_policy, client_auth = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
# The NetworkPolicy: on by default, ingress to the webhook and metrics ports only.
policy = one(defaults, "NetworkPolicy")
assert policy["spec"]["policyTypes"] == ["Ingress"], policy
assert policy["spec"]["podSelector"]["matchLabels"] == one(defaults, "Deployment")["spec"]["selector"]["matchLabels"], policy
ports = [[p["port"] for p in rule["ports"]] for rule in policy["spec"]["ingress"]]
assert ports == [[9443], [8080]], ports
assert all("from" not in rule for rule in policy["spec"]["ingress"]), "[] = any source"
assert not any(d["kind"] == "NetworkPolicy" for d in no_policy), "networkPolicy.enabled=false renders none"
rules = one(client_auth, "NetworkPolicy")["spec"]["ingress"]
assert rules[0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}], rules
assert rules[1]["from"] == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}], rules
# Client auth: without a CA no approval is stamped (no flag); with one, the CA is mounted and
# the API server's name required; the insecure switch is a flag of its own.
args = container(defaults)["args"]
assert not any(a.startswith("--webhook-client") or a.startswith("--webhook-unauth") for a in args), args
assert "--webhook-unauthenticated-approvals" in container(no_policy)["args"]
c = container(client_auth)
assert "--webhook-client-ca=/client-ca/ca.crt" in c["args"], c["args"]
assert "--webhook-client-names=kube-apiserver-webhook-client" in c["args"], c["args"]
assert "--webhook-unauthenticated-approvals" not in c["args"], c["args"]
assert {"name": "webhook-client-ca", "mountPath": "/client-ca", "readOnly": True} in c["volumeMounts"], c
assert {"name": "webhook-tls", "mountPath": "/tls", "readOnly": True} in c["volumeMounts"], c
cm = next(d for d in client_auth if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "pf-pseudoflow-webhook-client-ca")
assert cm["data"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----"), cm
PY
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
# Every namespace watched: Secrets and impersonation cluster-wide, and no per-namespace Role.
role = next(d for d in defaults if d["kind"] == "ClusterRole")
assert {"resources": ["secrets"], "verbs": ["get", "create", "update"]}.items() <= next(r for r in role["rules"] if r["resources"] == ["secrets"]).items()
assert any(r["resources"] == ["serviceaccounts"] and r["verbs"] == ["impersonate"] for r in role["rules"]), role
assert any(r["resources"] == ["jobs"] and "create" in r["verbs"] for r in role["rules"]), role
assert {"apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["list", "create", "patch", "delete"]} in role["rules"], role
assert not any(d["kind"] == "Role" and d["metadata"]["name"].endswith(("-flows", "-own-secrets")) for d in defaults)
PY
python3 - "$out/all.yaml" tests/rendered-rules.yaml <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted({d["kind"] for d in docs})
want = {"ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition", "Deployment", "NetworkPolicy", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration"}
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
# watchNamespaces set: Secrets and impersonation per watched namespace, not cluster-wide.
assert not any(set(r["resources"]) & {"secrets", "serviceaccounts", "jobs", "pods", "controllerrevisions"} for r in role["rules"]), role["rules"]
for ns in ["a", "b"]:
    r = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "pf-pseudoflow-flows" and d["metadata"]["namespace"] == ns)
    assert r["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "update"]}, {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}, {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "delete"]}, {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}, {"apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["list", "create", "patch", "delete"]}], r
    b = next(d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "pf-pseudoflow-flows" and d["metadata"]["namespace"] == ns)
    assert b["subjects"] == [{"kind": "ServiceAccount", "name": "pf-pseudoflow", "namespace": "pseudoflow-system"}], b
own = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "pf-pseudoflow-own-secrets")
assert own["metadata"]["namespace"] == "pseudoflow-system" and own["rules"][0]["resources"] == ["secrets"], own
rule = next(d for d in docs if d["kind"] == "PrometheusRule")
yaml.safe_dump({"groups": rule["spec"]["groups"]}, open(sys.argv[2], "w"))
print(f"rendered {len(docs)} objects: {', '.join(kinds)}")
PY
promtool check rules tests/rendered-rules.yaml
promtool test rules tests/alerts_test.yaml
lua5.4 tests/health_test.lua "$CHART/argocd/health.lua"
lua5.4 tests/actions_test.lua "$CHART/argocd/actions"
# docs/gitops.md shows the argocd-cm snippet as argocd-cm.py makes it from these scripts.
python3 - <<'PY'
import importlib.util, yaml
spec = importlib.util.spec_from_file_location("argocd_cm", "argocd-cm.py")
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
text = m.snippet()
data = yaml.safe_load(text)["data"]
actions = yaml.safe_load(data["resource.customizations.actions.ops.example.com_PseudoFlow"])
assert [d["name"] for d in actions["definitions"]] == m.ACTIONS, actions["definitions"]
assert all(d["action.lua"].strip() for d in actions["definitions"]) and actions["discovery.lua"].strip()
assert text in open("../docs/gitops.md").read(), "docs/gitops.md's argocd-cm snippet is not what charts/argocd-cm.py prints: paste its output there"
PY
rm -f tests/rendered-rules.yaml
