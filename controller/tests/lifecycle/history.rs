//! Bounded history on testenv (docs/decisions.md "Bounded history"): a flow re-run eight times
//! keeps the Jobs, pods and input Secrets of its newest three runs only (CronJob's default
//! `successfulJobsHistoryLimit`), and a failed run a retry would start from keeps its objects
//! even when the flow keeps no failed runs.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::{json, Value};

use crate::common::api::eventually;
use crate::common::harness::{apply, create_flow, setup, wait_done};
use crate::common::{flows, request_run, wait_status};

const STEP_INPUT: &str = "ops.example.com/step-input";

/// The run ids (`ops.example.com/run`) of the objects of kind `K` in `ns` that flow `flow`'s
/// labels mark, Secrets only of type step-input (the run state is a Secret too).
async fn runs_of<K>(client: &Client, ns: &str, flow: &str) -> BTreeSet<String>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let selector = format!("ops.example.com/flow={flow}");
    Api::<K>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|o| {
            o.meta()
                .labels
                .as_ref()?
                .get("ops.example.com/run")
                .cloned()
        })
        .collect()
}

/// The run ids of the flow's input Secrets.
async fn input_runs(client: &Client, ns: &str, flow: &str) -> BTreeSet<String> {
    let selector = format!("ops.example.com/flow={flow}");
    Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|s| s.type_.as_deref() == Some(STEP_INPUT))
        .filter_map(|s| {
            s.metadata
                .labels
                .as_ref()?
                .get("ops.example.com/run")
                .cloned()
        })
        .collect()
}

/// Counts of what the flow left: (Jobs, pods, input Secrets), and the runs they belong to.
async fn left(client: &Client, ns: &str, flow: &str) -> (usize, usize, usize, BTreeSet<String>) {
    let selector = format!("ops.example.com/flow={flow}");
    let lp = ListParams::default().labels(&selector);
    let jobs = Api::<Job>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap();
    let secrets = Api::<Secret>::namespaced(client.clone(), ns)
        .list(&lp)
        .await
        .unwrap();
    let inputs = secrets
        .items
        .iter()
        .filter(|s| s.type_.as_deref() == Some(STEP_INPUT))
        .count();
    let mut runs = runs_of::<Job>(client, ns, flow).await;
    runs.extend(runs_of::<Pod>(client, ns, flow).await);
    runs.extend(input_runs(client, ns, flow).await);
    (jobs.items.len(), pods.items.len(), inputs, runs)
}

/// Waits for the run that `trigger` started to end; returns the status.
async fn run_ended(client: &Client, ns: &str, flow: &str, trigger: &str) -> Value {
    wait_status(client, ns, flow, 90, "the re-run's end", |st| {
        st["run"]["trigger"] == trigger && (st["phase"] == "Succeeded" || st["phase"] == "Failed")
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_run_eight_times_keeps_the_jobs_pods_and_secrets_of_three_runs() {
    let (client, ns) = setup("history").await;
    let step = json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made", "namespace": ns}}});
    create_flow(
        &client,
        &ns,
        "again",
        json!({"serviceAccountName": "flow", "steps": [step]}),
    )
    .await;
    let first = wait_done(&client, &ns, "again").await;
    assert_eq!(first["phase"], "Succeeded");
    // Someone else's ConfigMap carrying the flow's and the first run's labels: not the flow's
    // (no owner reference), so never deleted with the run.
    let first_run = first["run"]["id"].as_str().unwrap();
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "planted", "namespace": ns,
        "labels": {"ops.example.com/flow": "again", "ops.example.com/run": first_run}}})).await;
    let mut status = Value::Null;
    for i in 2..=8 {
        request_run(&client, &ns, "again", &i.to_string()).await;
        status = run_ended(&client, &ns, "again", &i.to_string()).await;
        assert_eq!(status["phase"], "Succeeded", "{status:#}");
    }
    // The newest three runs: the current one and the two before it.
    let previous = status["previousRuns"].as_array().unwrap();
    assert_eq!(
        previous.len(),
        5,
        "status.previousRuns stays as it was: {status:#}"
    );
    let newest: BTreeSet<String> = std::iter::once(&status["run"]["id"])
        .chain(previous.iter().take(2).map(|p| &p["id"]))
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    let expected = (3, 3, 3, newest.clone());
    let mut last = (0, 0, 0, BTreeSet::new());
    for _ in 0..150 {
        last = left(&client, &ns, "again").await;
        if last == expected {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        last, expected,
        "(Jobs, pods, input Secrets, their runs) after 8 runs; the newest 3 runs are {newest:?}"
    );
    assert!(
        crate::common::harness::config_map(&client, &ns, "planted")
            .await
            .is_some(),
        "an object the flow does not own stays, whatever its labels"
    );
    // Every Job carries the backstop TTL (7 days) for Jobs no controller returns to.
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("ops.example.com/flow=again"))
        .await
        .unwrap()
        .items;
    assert!(
        jobs.iter()
            .all(|j| j.spec.as_ref().unwrap().ttl_seconds_after_finished == Some(604_800)),
        "every Job has ttlSecondsAfterFinished: 604800"
    );
    // The run state is the flow's, not an old run's: it stays.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let states = secrets.list(&ListParams::default()).await.unwrap().items;
    assert!(
        states
            .iter()
            .any(|s| s.type_.as_deref() == Some("ops.example.com/run-state")),
        "the run-state Secret is still there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_keeps_its_objects_for_its_retry_even_with_no_failed_runs_kept() {
    let (client, ns) = setup("history-retry").await;
    // The flow's account may not create Secrets (yet): the second step fails, Forbidden.
    let steps = json!([
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "first", "namespace": ns}}},
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "second", "namespace": ns}}},
    ]);
    let options = json!({"failedRunsHistoryLimit": 0, "successfulRunsHistoryLimit": 1});
    create_flow(
        &client,
        &ns,
        "fix",
        json!({"serviceAccountName": "flow", "steps": steps, "options": options}),
    )
    .await;
    let first = wait_done(&client, &ns, "fix").await;
    assert_eq!(first["phase"], "Failed", "{first:#}");
    request_run(&client, &ns, "fix", "2").await;
    let failed = run_ended(&client, &ns, "fix", "2").await;
    assert_eq!(failed["phase"], "Failed", "{failed:#}");
    let (old, current) = (
        first["run"]["id"].as_str().unwrap(),
        failed["run"]["id"].as_str().unwrap(),
    );
    // The older failure goes (the flow keeps no failed runs); the current one stays, whole.
    let only_current: BTreeSet<String> = [current.to_string()].into();
    eventually(
        30,
        "only the current failed run's Jobs are left",
        || async { runs_of::<Job>(&client, &ns, "fix").await == only_current },
    )
    .await;
    // The old run's pods go after its Jobs (deleted with propagation Background, the garbage
    // collector removes the pods when it gets to them): wait for that, not for a fixed time.
    // (Both steps may run in one Job, fused: a Job, its pod and its input per Job.)
    let mut last = (0, 0, 0, BTreeSet::new());
    for _ in 0..150 {
        last = left(&client, &ns, "fix").await;
        let (jobs, pods, inputs, runs) = &last;
        if *jobs >= 1 && (pods, inputs, runs) == (jobs, jobs, &only_current) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (jobs, pods, inputs, runs) = last;
    assert!(jobs >= 1, "the failed run {current} keeps its Jobs");
    assert_eq!(
        (pods, inputs, runs),
        (jobs, jobs, only_current.clone()),
        "the failed run {current} keeps its Jobs' pods and inputs; {old} lost its own"
    );
    // Grant what was missing, then retry: it starts from the kept run and succeeds.
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "secrets", "namespace": ns}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]}]})).await;
    apply(&client, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "secrets", "namespace": ns}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets"}, "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]})).await;
    flows(&client, &ns)
        .patch(
            "fix",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"ops.example.com/retry": "1"}}})),
        )
        .await
        .unwrap();
    wait_status(
        &client,
        &ns,
        "fix",
        90,
        "the retry of the kept run succeeded",
        |st| st["run"]["retryOf"] == current && st["phase"] == "Succeeded",
    )
    .await;
}

/// The run ids of the flow's segment journal ConfigMaps (one per fused Job).
async fn journal_runs(client: &Client, ns: &str, flow: &str) -> BTreeSet<String> {
    let selector = format!("ops.example.com/flow={flow},ops.example.com/role=segment-journal");
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|c| {
            c.metadata
                .labels
                .as_ref()?
                .get("ops.example.com/run")
                .cloned()
        })
        .collect()
}

/// The ConfigMaps a run's executor writes (here the journal of a fused Job of two steps) go
/// with the run's Jobs: a flow keeping 2 succeeded runs, run 5 times, keeps the journals of
/// its newest 2 runs only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_configmaps_go_with_its_jobs_beyond_the_limit() {
    let (client, ns) = setup("history-cm").await;
    let cm = |name: &str| json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}});
    create_flow(
        &client,
        &ns,
        "fused",
        json!({"serviceAccountName": "flow", "options": {"successfulRunsHistoryLimit": 2},
            "steps": [cm("one"), cm("two")]}),
    )
    .await;
    let first = wait_done(&client, &ns, "fused").await;
    assert_eq!(first["phase"], "Succeeded", "{first:#}");
    let mut runs = vec![first["run"]["id"].as_str().unwrap().to_string()];
    assert_eq!(
        journal_runs(&client, &ns, "fused").await,
        [runs[0].clone()].into(),
        "a fused Job of two steps writes a journal"
    );
    for i in 2..=5 {
        request_run(&client, &ns, "fused", &i.to_string()).await;
        let st = run_ended(&client, &ns, "fused", &i.to_string()).await;
        assert_eq!(st["phase"], "Succeeded", "{st:#}");
        runs.push(st["run"]["id"].as_str().unwrap().to_string());
    }
    let newest: BTreeSet<String> = runs[3..].iter().cloned().collect();
    eventually(30, "the journals of the newest 2 runs only", || async {
        journal_runs(&client, &ns, "fused").await == newest
    })
    .await;
}
