#!/usr/bin/env python3
# Seed 001's kopf operator (shared/seeds/001_*.txt, section "Реализация Operator", the file the
# seed saves as controller/database_operator.py), copied for `make bench`'s `seed-kopf` section
# (controller/benches/compare/seed_kopf.rs), which runs it against examples/kopf/database.yaml.
#
# What changed: only this comment. Every line below it is the seed's, byte for byte (trailing
# spaces included). How it runs changed as little as it could: the seed runs
#   kopf run controller/database_operator.py --verbose
# (cluster-wide, against its kubeconfig); the bench runs
#   kopf run --standalone --namespace <its namespace> --verbose bench/kopf/seed001.py
# with KUBECONFIG set to testenv's (`config.load_kube_config()` below reads it):
# `--namespace` so that it serves only its own namespace, not the flow's Databases measured in
# the same cluster; `--standalone` so that it does not look for kopf's peering resources (the
# seed installs none: without the flag kopf warns and runs standalone anyway). kopf and the
# `kubernetes` client are pinned in bench/kopf/requirements.txt (bench/setup-kopf.sh).
import kopf
from kubernetes import client, config

config.load_kube_config()
v1 = client.CoreV1Api()

@kopf.on.create('example.com', 'v1', 'databases')
def create_fn(spec, name, namespace, logger, **kwargs):
    """Create Pod when Database object is created"""
    logger.info(f"Creating Pod for Database {namespace}/{name}")
    
    version = spec.get('version', 'latest')
    size = spec.get('size', '1Gi')
    
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=f"{name}-pod",
            namespace=namespace,
            labels={
                "app": "database",
                "database-name": name
            }
        ),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="database",
                    image=f"postgres:{version}" if "postgres" in name else f"mysql:{version}",
                    env=[
                        client.V1EnvVar(name="POSTGRES_PASSWORD", value="example") if "postgres" in name 
                        else client.V1EnvVar(name="MYSQL_ROOT_PASSWORD", value="example"),
                    ],
                    resources=client.V1ResourceRequirements(
                        requests={"memory": "256Mi", "cpu": "100m"},
                        limits={"memory": "512Mi", "cpu": "500m"}
                    )
                )
            ],
            restart_policy="Always"
        )
    )
    
    try:
        v1.create_namespaced_pod(namespace=namespace, body=pod)
        logger.info(f"Pod {name}-pod created successfully")
        return {'pod-name': f"{name}-pod"}
    except Exception as e:
        logger.error(f"Failed to create Pod: {e}")
        raise

@kopf.on.delete('example.com', 'v1', 'databases')
def delete_fn(spec, name, namespace, logger, **kwargs):
    """Delete Pod when Database object is deleted"""
    pod_name = f"{name}-pod"
    logger.info(f"Deleting Pod {namespace}/{pod_name}")
    
    try:
        v1.delete_namespaced_pod(
            name=pod_name,
            namespace=namespace,
            body=client.V1DeleteOptions()
        )
        logger.info(f"Pod {pod_name} deleted successfully")
    except client.exceptions.ApiException as e:
        if e.status == 404:
            logger.info(f"Pod {pod_name} not found, nothing to delete")
        else:
            logger.error(f"Failed to delete Pod: {e}")
            raise
