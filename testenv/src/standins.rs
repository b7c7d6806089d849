//! The declared stand-ins: the workload images that flows deploy and that no registry here can
//! serve (nothing is pulled: testenv is offline). This table is the one place they are listed;
//! `testenv/README.md` ("Stand-ins") says what each one does.
//!
//! - On the **simulated kubelet** an image of a stand-in's repository (any tag) runs as a
//!   process that sleeps until the pod is deleted: the pod is Running and Ready because that
//!   process runs, and ends like a container when it is killed. The container's command and args
//!   are not run (there is no such program here).
//! - On **real nodes** each stand-in's exact reference is the pause image (`make images`:
//!   a static binary that sleeps, ignores its arguments and exits on SIGTERM), tagged under the
//!   workload's name in the node's containerd before the kubelet starts; a workload that sets
//!   `command:` would not find its program there.
//!
//! Any other image that is not mapped to a program ([`crate::ImageMap`]) or imported fails the
//! pod as a real kubelet does on an offline cluster: `ErrImagePull`, then `ImagePullBackOff`,
//! the pod Pending and never Ready.

/// One stand-in: an image reference a flow or a test deploys.
#[derive(Debug, Clone, Copy)]
pub struct StandIn {
    /// The exact reference, as the manifests write it; on the simulated kubelet every tag of its
    /// repository is the same stand-in.
    pub image: &'static str,
    /// Who deploys it.
    pub used_by: &'static str,
}

/// Every declared stand-in. Keep `testenv/README.md` in step.
pub const STAND_INS: &[StandIn] = &[
    StandIn {
        image: "registry.k8s.io/dns/k8s-dns-node-cache:1.22.28",
        used_by: "the seed's NodeLocal DNS DaemonSet (examples/artifacts/nodelocaldns.yaml)",
    },
    StandIn {
        image: "registry.k8s.io/pause:3.10",
        used_by: "rollout tests' Deployments and DaemonSets (controller/tests/steps_api/in_jobs.rs, testenv/tests/cluster.rs)",
    },
    StandIn {
        image: "nginx:1.27",
        used_by: "the werf bundle (examples/kopf/werf-bundle.yaml; 1.28 after its update), testenv/tests/cluster.rs",
    },
    StandIn {
        image: "nginx:1.28",
        used_by: "the werf bundle's update (controller/tests/examples/kopf.rs)",
    },
    StandIn {
        image: "postgres:15.3",
        used_by: "the bound Database flow (examples/kopf/database.yaml)",
    },
    StandIn {
        image: "mysql:8.0",
        used_by: "the bound Database flow and the MySQL backup flow (examples/kopf/); the controller tests map mysql:8.0 to a fake server with client tools instead (tests/fixtures/fake-mysql), which wins over the stand-in",
    },
    StandIn {
        image: "example/app:1",
        used_by: "the workload pods drained in controller/tests/node_maintenance.rs",
    },
];

/// The stand-in `image` is, if any: the exact reference, or one of the same repository.
pub fn stand_in(image: &str) -> Option<&'static StandIn> {
    let repo = repository(image);
    STAND_INS
        .iter()
        .find(|s| s.image == image || repository(s.image) == repo)
}

/// `image` without its tag or digest.
fn repository(image: &str) -> &str {
    let image = image.split_once('@').map_or(image, |(i, _)| i);
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => image,
    }
}

/// The fully qualified reference containerd's CRI looks an image up by:
/// `nginx:1.27` → `docker.io/library/nginx:1.27`, `example/app:1` → `docker.io/example/app:1`.
pub fn qualified(image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    let has_registry =
        image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let named = if has_registry {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    };
    let last = named.rsplit('/').next().unwrap_or_default();
    if last.contains(':') || named.contains('@') {
        named
    } else {
        format!("{named}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_tag_of_a_stand_ins_repository_is_that_stand_in() {
        assert!(stand_in("registry.k8s.io/dns/k8s-dns-node-cache:1.22.28").is_some());
        assert_eq!(stand_in("postgres:16").unwrap().image, "postgres:15.3");
        assert!(stand_in("nginx").is_some());
        assert!(stand_in("example.invalid/nope:1").is_none());
        assert!(stand_in("postgresql:1").is_none());
    }

    #[test]
    fn references_are_qualified_as_containerd_names_them() {
        assert_eq!(qualified("nginx:1.27"), "docker.io/library/nginx:1.27");
        assert_eq!(qualified("example/app:1"), "docker.io/example/app:1");
        assert_eq!(
            qualified("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(qualified("localhost:5000/x"), "localhost:5000/x:latest");
        assert_eq!(qualified("mysql"), "docker.io/library/mysql:latest");
    }
}
