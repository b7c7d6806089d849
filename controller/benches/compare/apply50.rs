//! Benchmark 1: the same 50 ConfigMaps in one namespace, one per step — a PseudoFlow of 50
//! `apply` steps (the controller in-process), `ansible-playbook` with 50 `kubernetes.core.k8s`
//! tasks (pinned, from bench/setup-ansible.sh), and a shell loop of 50
//! `kubectl apply --server-side`. The ConfigMaps are deleted before every run; the runs of the
//! three drivers take turns so that background load hits them alike.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;
use pseudoflow_test_support::FlowNamespace;
use pseudoflow_testenv::{apply, TestEnv};
use serde_json::{json, Value};

use crate::common::{self, JobCounter, Row};
use crate::process;

const CMS: usize = 50;
const LABEL: &str = "pfbench";
const LABEL_VALUE: &str = "apply50";

fn config_map(ns: &str, i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "namespace": ns, "labels": {LABEL: LABEL_VALUE}},
        "data": {"index": i.to_string()}})
}

/// The ansible venv: `$PSEUDOFLOW_ANSIBLE_VENV` or the cache directory setup-ansible.sh fills.
fn ansible_playbook() -> PathBuf {
    let venv = std::env::var_os("PSEUDOFLOW_ANSIBLE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
                });
            cache.join("pseudoflow").join("ansible-venv")
        });
    let p = venv.join("bin").join("ansible-playbook");
    assert!(
        p.is_file(),
        "{} missing: run bench/setup-ansible.sh (make bench does)",
        p.display()
    );
    p
}

/// 50 tasks, one `kubernetes.core.k8s` each, as a person would write them (state: present).
fn playbook(ns: &str, kubeconfig: &Path) -> String {
    let mut y = String::from("- hosts: localhost\n  connection: local\n  gather_facts: false\n  vars:\n    ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n  tasks:\n");
    for i in 0..CMS {
        let def = serde_json::to_string(&config_map(ns, i)).unwrap();
        write!(
            y,
            "    - name: cm-{i}\n      kubernetes.core.k8s:\n        kubeconfig: {kc}\n        state: present\n        definition: {def}\n",
            kc = kubeconfig.display()
        )
        .unwrap();
    }
    y
}

/// Deletes the benchmark's ConfigMaps and waits until none is left.
async fn clear(client: &Client, ns: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{LABEL}={LABEL_VALUE}"));
    cms.delete_collection(&DeleteParams::default(), &lp)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cms.list(&lp).await.unwrap().items.is_empty() {
        assert!(Instant::now() < deadline, "ConfigMaps in {ns} not deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// All 50 ConfigMaps are there with their data.
async fn check(client: &Client, ns: &str, driver: &str) {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{LABEL}={LABEL_VALUE}"));
    let items = cms.list(&lp).await.unwrap().items;
    assert_eq!(items.len(), CMS, "{driver}: ConfigMaps made");
    for cm in items {
        let i = cm
            .metadata
            .name
            .as_deref()
            .unwrap()
            .trim_start_matches("cm-");
        assert_eq!(
            cm.data.unwrap_or_default().get("index").map(String::as_str),
            Some(i),
            "{driver}"
        );
    }
}

fn run_command(what: &str, cmd: &mut std::process::Command) -> Duration {
    let t = Instant::now();
    let out = cmd.output().unwrap();
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// The section on `env`'s nodes, executor pods from `image`; `title` names the rows'
/// workload (the section's number, and which nodes).
pub async fn run(
    env: &TestEnv,
    client: &Client,
    dir: &Path,
    runs: usize,
    image: &str,
    title: &str,
) -> Vec<Row> {
    let ns = FlowNamespace::new("apply50")
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch", "update"]}]))
        .create(env, client)
        .await;
    let ctl = process::in_process(client, image, &ns, false);
    let counter = JobCounter::start(client, &ns).await;

    let kc = env.kubeconfig_path();
    let book = dir.join("apply50-playbook.yml");
    std::fs::write(&book, playbook(&ns, kc)).unwrap();
    let ansible = ansible_playbook();
    let kubectl = common::kubectl();
    let mut script = String::from("set -e\n");
    for i in 0..CMS {
        let f = dir.join(format!("apply50-cm-{i}.json"));
        std::fs::write(&f, serde_json::to_string(&config_map(&ns, i)).unwrap()).unwrap();
        writeln!(
            script,
            "{k} --kubeconfig {kc} apply --server-side -f {f} >/dev/null",
            k = kubectl.display(),
            kc = kc.display(),
            f = f.display()
        )
        .unwrap();
    }
    let loop_sh = dir.join("apply50-kubectl.sh");
    std::fs::write(&loop_sh, script).unwrap();
    let steps: Vec<Value> = (0..CMS)
        .map(|i| json!({"type": "apply", "manifests": config_map(&ns, i)}))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (mut pf, mut an, mut kl, mut jobs) = (vec![], vec![], vec![], vec![]);
    for r in 0..runs {
        clear(client, &ns).await;
        let name = format!("apply50-{r}");
        let t = Instant::now();
        apply::apply_value(client, json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": name, "namespace": ns}, "spec": {"serviceAccountName": "flow", "steps": steps}}), None).await.unwrap();
        common::wait_succeeded(client, &ns, &name, 600).await;
        pf.push(t.elapsed());
        check(client, &ns, "PseudoFlow").await;
        // Jobs are created before the steps they run finish: all are counted by now.
        jobs.push(counter.of_flow(&name));

        clear(client, &ns).await;
        an.push(run_command(
            "ansible-playbook",
            std::process::Command::new(&ansible)
                .args(["-i", "localhost,"])
                .arg(&book)
                .env("ANSIBLE_LOCALHOST_WARNING", "False")
                .env("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
                .env("ANSIBLE_HOME", dir.join("ansible-home")),
        ));
        check(client, &ns, "ansible-playbook").await;

        clear(client, &ns).await;
        kl.push(run_command(
            "kubectl loop",
            std::process::Command::new("bash").arg(&loop_sh),
        ));
        check(client, &ns, "kubectl loop").await;
        println!(
            "apply50 run {}/{runs}: PseudoFlow {:.1} s ({} Jobs), ansible-playbook {:.1} s, kubectl loop {:.1} s",
            r + 1,
            pf[r].as_secs_f64(),
            jobs[r],
            an[r].as_secs_f64(),
            kl[r].as_secs_f64()
        );
    }
    ctl.abort();
    clear(client, &ns).await;

    let (pfm, anm, klm) = (
        common::median(&pf),
        common::median(&an),
        common::median(&kl),
    );
    let jobs_str = if jobs.iter().all(|j| *j == jobs[0]) {
        jobs[0].to_string()
    } else {
        format!("{jobs:?}")
    };
    let w = format!("{title} {CMS} ConfigMaps, one step/task/command each");
    vec![
        Row {
            workload: w.clone(),
            driver: format!("PseudoFlow, {CMS} `apply` steps"),
            wall: common::spread(&pf),
            jobs: jobs_str,
            ratio: "1.00×".into(),
            notes: "from creating the flow to Succeeded".into(),
        },
        Row {
            workload: w.clone(),
            driver: format!("`ansible-playbook`, {CMS} `kubernetes.core.k8s` tasks"),
            wall: common::spread(&an),
            jobs: "0".into(),
            ratio: common::ratio(pfm, anm),
            notes: ansible_versions(&ansible),
        },
        Row {
            workload: w,
            driver: format!("shell loop of {CMS} `kubectl apply --server-side`"),
            wall: common::spread(&kl),
            jobs: "0".into(),
            ratio: common::ratio(pfm, klm),
            notes: "kubectl v1.34.4, one process per ConfigMap".into(),
        },
    ]
}

/// "ansible-core 2.19.14, kubernetes.core 6.x.y, kubernetes 34.1.0" as installed.
fn ansible_versions(playbook: &Path) -> String {
    let bin = playbook.parent().unwrap();
    let core = std::process::Command::new(playbook)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let s = String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()?
                .to_string();
            Some(s.split("core ").nth(1)?.trim_end_matches(']').to_string())
        })
        .unwrap_or_else(|| "?".into());
    let py = bin.join("python");
    let coll = std::process::Command::new(bin.join("ansible-galaxy"))
        .args(["collection", "list", "kubernetes.core"])
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.starts_with("kubernetes.core"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .unwrap_or_else(|| "?".into());
    let client = std::process::Command::new(py)
        .args(["-c", "import kubernetes; print(kubernetes.__version__)"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into());
    format!("ansible-core {core}, kubernetes.core {coll}, kubernetes (Python) {client}")
}
