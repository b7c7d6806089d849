"""The operator a platform team writes with kopf for the work of `make bench`'s `kopf` section,
as the seeds (001-004) write theirs: on each new Gadget, a ConfigMap named after it holding
`spec.size`, then `status.phase: Ready` and a Ready condition. The bound flow it is compared
with (controller/benches/compare/kopf.rs) does exactly this."""

import kopf
import kubernetes

GROUP, VERSION, PLURAL = "bench.example.com", "v1", "gadgets"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    kubernetes.config.load_kube_config()
    # As a user would run it, but without kopf's own Events (the flow is not asked for any
    # either beyond its per-step ones) and without waiting for peers.
    settings.posting.enabled = False


@kopf.on.create(GROUP, VERSION, PLURAL)
def create(spec, name, namespace, patch, **_):
    body = kubernetes.client.V1ConfigMap(
        metadata=kubernetes.client.V1ObjectMeta(name=f"{name}-config", namespace=namespace),
        data={"size": str(spec.get("size", ""))},
    )
    api = kubernetes.client.CoreV1Api()
    try:
        api.create_namespaced_config_map(namespace, body)
    except kubernetes.client.exceptions.ApiException as e:
        if e.status != 409:
            raise
    patch.status["phase"] = "Ready"
    patch.status["conditions"] = [{"type": "Ready", "status": "True", "reason": "Created"}]
