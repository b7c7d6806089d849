#!/usr/bin/env python3
# Seed 002's SecSynch controller as a kopf operator: OUR PORT, not the seed's code. The seed
# (shared/seeds/002_*.txt) describes a kubebuilder Go controller (a `SecSynch` naming a Secret
# and the namespaces it is copied into) without giving its full code, so there is no seed code to
# copy as bench/kopf/seed001.py copies seed 001's. This is the same job written the way a kopf
# user would, in seed001.py's style, for `make bench`'s `seed-kopf` section
# (controller/benches/compare/seed002_kopf.rs), which runs it against
# examples/kopf/secret-sync.yaml on the same CRD (examples/kopf/secret-sync-crd.yaml). It does
# what that flow does, without the seed's bugs (its part 3):
#   - on create and on a change of the spec (and on resume): the namespaces that may hold a copy
#     (status.copiedTo, read from the handler's `status`, with the ones listed) are recorded in
#     status.copiedTo before copying; the Secret is read and written into each listed namespace
#     (a same-named Secret this operator did not copy is not overwritten: the handler fails);
#     the copies in namespaces no longer listed are deleted; status.copiedTo is then the list;
#   - a change of the Secret's data copies it again (an index of SecSynches by Secret);
#   - on delete: the copies in every recorded or listed namespace are deleted.
# Run by the bench as seed001.py is:
#   kopf run --standalone --namespace <its namespace> --verbose bench/kopf/seed002.py
# with KUBECONFIG set to testenv's; kopf and the `kubernetes` client are pinned in
# bench/kopf/requirements.txt (bench/setup-kopf.sh).
import kopf
from kubernetes import client, config

config.load_kube_config()
v1 = client.CoreV1Api()
custom = client.CustomObjectsApi()

GROUP, VERSION, PLURAL = 'k8sasdb.org', 'v1alpha1', 'secsynches'
COPIED_BY = 'k8sasdb.org/copied-by'


def owner_of(namespace, name):
    return f"{namespace}.{name}"


def copy_secret(source, target_ns, owner, logger):
    """Create or replace the copy of `source` in `target_ns`, unless someone else's is there."""
    name = source.metadata.name
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=target_ns,
                                     annotations={COPIED_BY: owner}),
        type=source.type,
        data=source.data,
    )
    try:
        existing = v1.read_namespaced_secret(name, target_ns)
    except client.exceptions.ApiException as e:
        if e.status != 404:
            raise
        v1.create_namespaced_secret(target_ns, body)
        logger.info(f"copied {name} into {target_ns}")
        return
    theirs = (existing.metadata.annotations or {}).get(COPIED_BY)
    if theirs != owner:
        raise kopf.PermanentError(f"{target_ns}/{name} is not a copy of ours; not overwritten")
    v1.replace_namespaced_secret(name, target_ns, body)
    logger.info(f"copied {name} into {target_ns} again")


def delete_copy(name, target_ns, owner, logger):
    """Delete the copy in `target_ns` if it is ours; anything else stays."""
    try:
        existing = v1.read_namespaced_secret(name, target_ns)
    except client.exceptions.ApiException as e:
        if e.status == 404:
            return
        raise
    if (existing.metadata.annotations or {}).get(COPIED_BY) != owner:
        logger.info(f"{target_ns}/{name} is not a copy of ours; left")
        return
    try:
        v1.delete_namespaced_secret(name, target_ns)
        logger.info(f"deleted the copy in {target_ns}")
    except client.exceptions.ApiException as e:
        if e.status != 404:
            raise


def sync(spec, status, name, namespace, patch, logger):
    targets = list(spec.get('destinationNamespaces') or [])
    before = list((status or {}).get('copiedTo') or [])
    recorded = sorted(set(before) | set(targets))
    # Recorded before copying, so that a handler stopped half-way still knows every namespace
    # it may have written to.
    if recorded != sorted(before):
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {'status': {'copiedTo': recorded}})
    source = v1.read_namespaced_secret(spec['secretName'], namespace)
    owner = owner_of(namespace, name)
    for target in targets:
        copy_secret(source, target, owner, logger)
    for gone in set(before) - set(targets):
        delete_copy(spec['secretName'], gone, owner, logger)
    patch.status['copiedTo'] = targets


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field='spec')
@kopf.on.resume(GROUP, VERSION, PLURAL)
def sync_fn(spec, status, name, namespace, patch, logger, **kwargs):
    """Copy the Secret into every listed namespace; delete the copies no longer listed."""
    sync(spec, status, name, namespace, patch, logger)


@kopf.index(GROUP, VERSION, PLURAL)
def by_secret(spec, name, **kwargs):
    """The SecSynches naming each Secret."""
    return {spec.get('secretName'): name}


@kopf.on.update('v1', 'secrets', field='data')
def secret_changed(name, namespace, by_secret: kopf.Index, logger, **kwargs):
    """A change of a Secret's data reaches the copies of every SecSynch naming it."""
    source = v1.read_namespaced_secret(name, namespace)
    for synch in by_secret.get(name, []):
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, synch)
        owner = owner_of(namespace, synch)
        for target in obj.get('spec', {}).get('destinationNamespaces') or []:
            copy_secret(source, target, owner, logger)


@kopf.on.delete(GROUP, VERSION, PLURAL)
def delete_fn(spec, status, name, namespace, logger, **kwargs):
    """Delete the copies in every namespace recorded or listed."""
    owner = owner_of(namespace, name)
    recorded = set((status or {}).get('copiedTo') or [])
    for target in recorded | set(spec.get('destinationNamespaces') or []):
        delete_copy(spec['secretName'], target, owner, logger)
