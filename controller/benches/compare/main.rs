//! `cargo bench -p pseudoflow-controller --bench compare` (part of `make bench`): how PseudoFlow
//! compares with the alternatives (and how much memory it takes), all in one run on one testenv
//! (real etcd, kube-apiserver, controller-manager and scheduler v1.34.4, simulated kubelets),
//! printed as one markdown table with ratios:
//!
//! 0. Pod start to step: a one-step flow, created to Succeeded (median of 5), on simulated and
//!    on real nodes.
//! 1. 50 ConfigMaps, one per step: PseudoFlow vs `ansible-playbook` (50 `kubernetes.core.k8s`
//!    tasks, pinned versions from bench/setup-ansible.sh) vs a loop of 50
//!    `kubectl apply --server-side`; median of `PSEUDOFLOW_BENCH_RUNS` (3) runs each.
//! 2. The seed's NodeLocal DNS flow on the cluster's 3 nodes: wall time and Jobs.
//! 3. The cluster grown to 100 nodes: configFile + patchFile + execNode in `loopNodes`,
//!    maxParallel 10 and 100, vs a `kubectl apply` + `wait` loop under `xargs -P`.
//! 4. `PSEUDOFLOW_BENCH_SCALE_FLOWS` (1,000) flows of 5 steps created at once, the controller a
//!    separate process: its peak RSS and the time until all Succeeded (gives up after
//!    `PSEUDOFLOW_BENCH_SCALE_TIMEOUT` seconds, 3600, and says how far it got).
//! 5. `PSEUDOFLOW_BENCH_BOUND_OBJECTS` (1,000) objects of one kind served by one bound flow:
//!    time until every object is Ready, the controller's peak RSS; then (5b) each object re-run
//!    `PSEUDOFLOW_BENCH_BOUND_RERUNS` (3) times and the Jobs, pods, Secrets, ConfigMaps and child
//!    flows left in the namespace counted (bounded history).
//! 6. Section 1 again on a cluster of 2 real nodes (containerd, runc, the runtime image of
//!    `make images`), started after the simulated one stops (section `real`).
//! 7. A flow bound to a kind vs the kopf operator it replaces (bench/kopf/operator.py), side by
//!    side: one object create → Ready (median of 5) and `PSEUDOFLOW_BENCH_KOPF_OBJECTS`
//!    (200,1000) objects at once, each process's peak RSS; on simulated nodes (section `kopf`)
//!    and, with `real`, on the real-node cluster (`real-kopf`: only this on real nodes).
//! 8. A seed's own kopf code, as the seed writes it, vs the flow we ship for it (section
//!    `seed-kopf`): seed 001's Database operator (bench/kopf/seed001.py) vs
//!    examples/kopf/database.yaml, `PSEUDOFLOW_BENCH_SEED_OBJECTS` (100) Databases created at
//!    once → all served, then deleted at once → all gone; each process's peak RSS. Then seed
//!    002's SecSynch controller, as our kopf port (bench/kopf/seed002.py: the seed gives no
//!    full code), vs examples/kopf/secret-sync.yaml: as many SecSynches, each copying a Secret
//!    of its own into 2 namespaces, created at once → every copy present, deleted at once →
//!    every SecSynch and copy gone (`seed002-kopf` runs only this).
//!    Section 4 runs once per design of `PSEUDOFLOW_BENCH_SCALE_DESIGNS` (`Controller,Job`:
//!    where the flows' API steps run, `spec.options.apiSteps`).
//!
//! Jobs are counted from a watch (every Job the flow owned, even if removed later), never assumed.
//! `PSEUDOFLOW_BENCH_SECTIONS` (e.g. `apply,seed`) runs a subset (`latency,apply,seed,fanout,scale,bound,kopf,seed-kopf,seed002-kopf,real`); the default is all.

mod api_load;
mod apply50;
mod bound;
mod common;
mod fanout;
mod kopf;
mod latency;
mod process;
mod rerun;
mod scale;
mod seed;
mod seed002_kopf;
mod seed_kopf;
mod seed_phases;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pseudoflow_test_support::install_crd;
use pseudoflow_testenv::{Options, TestEnv};

/// Nodes for the fan-out (benchmark 3).
const FANOUT_NODES: usize = 100;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sections = std::env::var("PSEUDOFLOW_BENCH_SECTIONS")
        .unwrap_or_else(|_| "latency,apply,seed,fanout,scale,bound,kopf,seed-kopf,real".into());
    let on = |s: &str| sections.split(',').any(|x| x.trim() == s);
    let runs = common::env_usize("PSEUDOFLOW_BENCH_RUNS", 3).max(1);
    let flows = common::env_usize("PSEUDOFLOW_BENCH_SCALE_FLOWS", 1000).max(1);
    let objects = common::env_usize("PSEUDOFLOW_BENCH_BOUND_OBJECTS", 1000).max(1);
    let seed_objects = common::env_usize("PSEUDOFLOW_BENCH_SEED_OBJECTS", 100).max(1);
    let kopf_counts: Vec<usize> = std::env::var("PSEUDOFLOW_BENCH_KOPF_OBJECTS")
        .unwrap_or_else(|_| "200,1000".into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("PSEUDOFLOW_BENCH_KOPF_OBJECTS: numbers")
        })
        .collect();
    let scale_timeout =
        Duration::from_secs(common::env_usize("PSEUDOFLOW_BENCH_SCALE_TIMEOUT", 3600) as u64);
    let step = common::sibling_binary(
        "pseudoflow-step",
        "cargo build --release -p pseudoflow-runtime --bin pseudoflow-step",
    );
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let dir = std::env::temp_dir().join(format!("pseudoflow-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let t0 = Instant::now();
    let mut opts = Options::default();
    opts.images.insert_runtime(common::IMAGE, &step);
    let env = TestEnv::start(opts).await.unwrap();
    println!(
        "testenv: {} nodes Ready in {:.1} s (state in {}, bench files in {})",
        env.nodes().len(),
        env.startup.as_secs_f64(),
        env.dir().display(),
        dir.display()
    );
    let client = env.client().await.unwrap();
    install_crd(&client).await;

    let mut rows = Vec::new();
    if on("latency") {
        rows.push(
            latency::run(
                &env,
                &client,
                5,
                common::IMAGE,
                "simulated nodes (executor as a host process)",
            )
            .await,
        );
        common::print_partial(&rows);
    }
    if on("apply") {
        rows.extend(apply50::run(&env, &client, &dir, runs, common::IMAGE, "1.").await);
        common::print_partial(&rows);
    }
    if on("seed") {
        rows.extend(seed::run(&env, &client, &repo, common::IMAGE, "simulated nodes").await);
        common::print_partial(&rows);
    }
    if on("fanout") || on("scale") {
        fanout::grow_cluster(&env, &client, FANOUT_NODES, &step).await;
    }
    if on("fanout") {
        rows.extend(fanout::run(&env, &client, &dir, &[10, 100]).await);
        common::print_partial(&rows);
    }
    if on("scale") {
        let designs = std::env::var("PSEUDOFLOW_BENCH_SCALE_DESIGNS")
            .unwrap_or_else(|_| "Controller,Job".into());
        for design in designs.split(',').map(str::trim) {
            rows.extend(scale::run(&env, &client, &dir, flows, scale_timeout, design).await);
            common::print_partial(&rows);
        }
        common::print_partial(&rows);
    }
    if on("bound") {
        rows.extend(bound::run(&env, &client, &dir, objects, scale_timeout).await);
        common::print_partial(&rows);
    }
    if on("kopf") {
        let title = "7. simulated nodes";
        rows.extend(kopf::run(&env, &client, &dir, &kopf_counts, scale_timeout, title).await);
        common::print_partial(&rows);
    }
    if on("seed-kopf") {
        rows.extend(seed_kopf::run(&env, &client, &dir, &repo, seed_objects, scale_timeout).await);
        common::print_partial(&rows);
    }
    if on("seed-kopf") || on("seed002-kopf") {
        let n = seed_objects;
        rows.extend(seed002_kopf::run(&env, &client, &dir, &repo, n, scale_timeout).await);
        common::print_partial(&rows);
    }
    if on("real") || on("real-kopf") {
        // The same work on a cluster of real nodes (kubelet, containerd, runc, CNI; the images
        // of `make images`), started once the simulated one is gone.
        drop(client);
        drop(env);
        let real = TestEnv::start(Options::with_real_nodes(0, 2))
            .await
            .unwrap_or_else(|e| panic!("real-node cluster did not start (make images first): {e}"));
        println!(
            "testenv: {} real nodes Ready in {:.1} s",
            real.real_nodes().len(),
            real.startup.as_secs_f64()
        );
        let client = real.client().await.unwrap();
        install_crd(&client).await;
        let image = pseudoflow_testenv::real_node::RUNTIME_IMAGE;
        let title = "real nodes (the runtime image under containerd and runc)";
        if on("real") {
            rows.push(latency::run(&real, &client, 5, image, title).await);
            common::print_partial(&rows);
            let title = "6. on 2 real nodes:";
            rows.extend(apply50::run(&real, &client, &dir, runs, image, title).await);
            common::print_partial(&rows);
            rows.extend(seed::run(&real, &client, &repo, image, "real nodes").await);
        }
        if on("kopf") || on("real-kopf") {
            let title = "7. on 2 real nodes";
            rows.extend(kopf::run(&real, &client, &dir, &kopf_counts, scale_timeout, title).await);
        }
        rows.push(image_sizes());
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    common::print_table(
        &format!(
            "PseudoFlow vs Ansible vs kubectl — testenv (kube v1.34.4): simulated kubelets, then (section 6 and the second row 0) 2 real nodes, {cpus} CPUs, load average at the end {}, whole run {:.0} s. Ratio: PseudoFlow's wall time ÷ the driver's (below 1.00× PseudoFlow is faster).",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            t0.elapsed().as_secs_f64()
        ),
        &rows,
    );
}

/// The OCI archives `make images` built (what a real node imports), as one row.
fn image_sizes() -> common::Row {
    let dir = pseudoflow_testenv::real_node::images_dir();
    let sizes: Vec<String> = ["runtime", "controller", "pause"]
        .iter()
        .map(|name| {
            let size =
                std::fs::metadata(dir.join(format!("{name}.oci.tar"))).map_or(0, |m| m.len());
            match size {
                s if s < 1024 * 1024 => format!("{name} {:.0} KiB", s as f64 / 1024.0),
                s => format!("{name} {:.1} MiB", s as f64 / (1024.0 * 1024.0)),
            }
        })
        .collect();
    common::Row {
        workload: "images of `make images` (OCI archives, compressed layers)".into(),
        driver: "-".into(),
        wall: "-".into(),
        jobs: "-".into(),
        ratio: "-".into(),
        notes: sizes.join(", "),
    }
}
