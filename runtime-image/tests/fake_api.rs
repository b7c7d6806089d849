//! API steps against a small in-memory fake API server (discovery, get, list, server-side
//! apply, merge patch, delete, 403s) plugged into `kube::Client` as a tower service. Real
//! control-plane behaviour is covered by the testenv e2e suite; this pins the executor's own
//! logic: `changed` detection, namespace defaulting, conditions, labels, 403 messages.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use pseudoflow_crd::protocol::{ExecutorInput, FlowRef, Task};
use pseudoflow_crd::protocol::{IncludedDocument, StepResult};
use pseudoflow_runtime::{execute, parse_input, ExecCtx};
use serde_json::{json, Value};

#[derive(Default)]
struct Store {
    objects: BTreeMap<String, Value>,
    forbidden: Vec<(String, String)>,
    watch_events: Vec<Value>,
    rv: u64,
    /// Discovery requests served.
    discovered: usize,
    /// Lists and watches served.
    listed: usize,
    watched: usize,
}

type Shared = Arc<Mutex<Store>>;

fn resources(group_version: &str) -> Option<Value> {
    let r = |name: &str, kind: &str, namespaced: bool| {
        json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
               "verbs": ["get", "list", "watch", "create", "patch", "delete"]})
    };
    let list = match group_version {
        "v1" => vec![
            r("configmaps", "ConfigMap", true),
            r("secrets", "Secret", true),
            r("nodes", "Node", false),
            r("pods", "Pod", true),
        ],
        "apps/v1" => vec![r("deployments", "Deployment", true)],
        _ => return None,
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": list}),
    )
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                  "reason": reason, "message": message}),
    )
}

fn handle(store: &Shared, method: &str, path: &str, query: &str, body: Value) -> (u16, Value) {
    let mut s = store.lock().unwrap();
    if s.forbidden.iter().any(|(m, p)| m == method && p == path) {
        return status(
            403,
            "Forbidden",
            &format!(
                "{path} is forbidden: User \"system:serviceaccount:ops:runner\" cannot {method}"
            ),
        );
    }
    if let Some(gv) = path
        .strip_prefix("/api/")
        .or_else(|| path.strip_prefix("/apis/"))
    {
        if let Some(list) = resources(gv) {
            s.discovered += 1;
            return (200, list);
        }
    }
    if query.contains("watch=true") {
        s.watched += 1;
        // One queued event per watch request; the stream then ends and the watcher re-watches.
        let ev = if s.watch_events.is_empty() {
            Value::Null
        } else {
            s.watch_events.remove(0)
        };
        return (200, ev);
    }
    match method {
        "GET" => {
            if let Some(o) = s.objects.get(path) {
                return (200, o.clone());
            }
            s.listed += 1;
            let prefix = format!("{path}/");
            let selector = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("labelSelector="))
                .map(|v| v.replace("%3D", "=").replace("%2F", "/"));
            let field_name = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("fieldSelector=metadata.name%3D"))
                .map(str::to_string);
            let items: Vec<Value> = s
                .objects
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix) && !k[prefix.len()..].contains('/'))
                .filter(|(_, o)| {
                    field_name
                        .as_ref()
                        .is_none_or(|n| o["metadata"]["name"] == json!(n))
                })
                .filter(|(_, o)| match &selector {
                    Some(sel) => sel.split(',').all(|req| match req.split_once('=') {
                        Some((k, v)) => o["metadata"]["labels"][k] == json!(v),
                        None => true,
                    }),
                    None => true,
                })
                .map(|(_, o)| o.clone())
                .collect();
            if items.is_empty()
                && !s.objects.keys().any(|k| k.starts_with(&prefix))
                && path.split('/').count() % 2 == 1
            {
                return status(404, "NotFound", "not found");
            }
            (
                200,
                json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": s.rv.to_string()}, "items": items}),
            )
        }
        "PATCH" => {
            let old = s.objects.get(path).cloned();
            let mut new = match (&old, query.contains("fieldManager")) {
                (_, true) => body,
                (Some(o), false) => {
                    let mut o = o.clone();
                    for (k, v) in body["metadata"]["labels"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default()
                    {
                        let labels = o["metadata"]
                            .as_object_mut()
                            .unwrap()
                            .entry("labels")
                            .or_insert(json!({}));
                        if v.is_null() {
                            labels.as_object_mut().unwrap().remove(&k);
                        } else {
                            labels[&k] = v;
                        }
                    }
                    o
                }
                (None, false) => return status(404, "NotFound", "not found"),
            };
            let strip = |v: &Value| {
                let mut v = v.clone();
                v["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("resourceVersion"));
                v
            };
            let same = old.as_ref().is_some_and(|o| strip(o) == strip(&new));
            let rv = match (&old, same) {
                (Some(o), true) => o["metadata"]["resourceVersion"].clone(),
                _ => {
                    s.rv += 1;
                    json!(s.rv.to_string())
                }
            };
            new["metadata"]["resourceVersion"] = rv;
            s.objects.insert(path.to_string(), new.clone());
            (200, new)
        }
        "DELETE" => match s.objects.remove(path) {
            Some(_) => (
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
            ),
            None => status(404, "NotFound", "not found"),
        },
        _ => status(405, "MethodNotAllowed", "no"),
    }
}

fn client(store: Shared) -> kube::Client {
    let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
        let store = store.clone();
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or("").to_string();
            let bytes = req.into_body().collect().await.unwrap().to_bytes();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, v) = handle(&store, &method, &path, &query, body);
            let text = if v.is_null() {
                String::new()
            } else {
                format!("{v}\n")
            };
            let resp = Response::builder()
                .status(StatusCode::from_u16(code).unwrap())
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(text)))
                .unwrap();
            Ok::<_, Infallible>(resp)
        }
    });
    kube::Client::new(svc, "ops")
}

async fn run(store: &Shared, task: Task, step: Value) -> StepResult {
    run_task(store, task, step, Some(20)).await
}

async fn run_with_timeout(store: &Shared, step: Value, timeout: Option<u32>) -> StepResult {
    run_task(store, Task::Run, step, timeout).await
}

async fn run_task(store: &Shared, task: Task, step: Value, timeout: Option<u32>) -> StepResult {
    run_sharing(store, (task, step, timeout), Arc::default()).await
}

/// [`run_task`] with what discovery found shared as `kinds` (as the controller shares it).
async fn run_sharing(
    store: &Shared,
    (task, step, timeout): (Task, Value, Option<u32>),
    kinds: Arc<pseudoflow_runtime::kind::Kinds>,
) -> StepResult {
    let input = ExecutorInput {
        flow: FlowRef {
            name: "f".into(),
            namespace: "ops".into(),
            uid: "u".into(),
            service_account: "runner".into(),
        },
        run_id: "r1".into(),
        node_id: "n".into(),
        path: "spec.steps[1]".into(),
        instance: vec![],
        attempt: 0,
        task,
        step,
        target_node: None,
        timeout_seconds: timeout,
        artifacts: vec![],
        segment: vec![],
        changed_before: false,
        journal_key: None,
        result_key: None,
    };
    let (input, step) = parse_input(&serde_json::to_string(&input).unwrap()).unwrap();
    let ctx = ExecCtx::new(input, PathBuf::from("/nonexistent"), String::new())
        .with_client(client(store.clone()))
        .with_kinds(kinds);
    execute(&ctx, &step).await.unwrap()
}

const CM: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dns\ndata:\n  ip: 169.254.20.10\n";

#[tokio::test]
async fn apply_defaults_the_namespace_and_reports_changes_only_once() {
    let store = Shared::default();
    let step = json!({"type": "apply", "manifests": CM});
    let r = run(&store, Task::Run, step.clone()).await;
    assert!(r.ok && r.changed, "{r:?}");
    assert!(store
        .lock()
        .unwrap()
        .objects
        .contains_key("/api/v1/namespaces/ops/configmaps/dns"));
    let r = run(&store, Task::Run, step).await;
    assert!(r.ok && !r.changed, "{r:?}");
    assert_eq!(r.message, "applied 1 object (unchanged): ConfigMap/ops/dns");
}

#[tokio::test]
async fn steps_sharing_what_discovery_found_ask_it_once_per_kind() {
    let store = Shared::default();
    let apply = || {
        (
            Task::Run,
            json!({"type": "apply", "manifests": CM}),
            Some(20),
        )
    };
    let discovered = || store.lock().unwrap().discovered;
    run_sharing(&store, apply(), Arc::default()).await;
    run_sharing(&store, apply(), Arc::default()).await;
    let alone = discovered();
    assert!(alone >= 2, "each step alone asks discovery: {alone}");
    let kinds = Arc::default();
    let r = run_sharing(&store, apply(), Arc::clone(&kinds)).await;
    assert!(r.ok, "{r:?}");
    let first = discovered() - alone;
    assert!(first >= 1, "the first step asks");
    for _ in 0..3 {
        let r = run_sharing(&store, apply(), Arc::clone(&kinds)).await;
        assert!(r.ok, "{r:?}");
    }
    assert_eq!(discovered() - alone, first, "the next ones ask nothing");
}

#[tokio::test]
async fn conditions_read_objects_and_treat_missing_ones_as_missing_paths() {
    let store = Shared::default();
    run(&store, Task::Run, json!({"type": "apply", "manifests": CM})).await;
    let cond = |op: &str, value: &str, name: &str| {
        json!({"type": "when", "condition": {
        "resource": {"kind": "ConfigMap", "name": name}, "jsonPath": "{.data.ip}", "op": op, "value": value}})
    };
    assert_eq!(
        run(
            &store,
            Task::Condition,
            cond("equals", "169.254.20.10", "dns")
        )
        .await
        .condition,
        Some(true)
    );
    assert_eq!(
        run(&store, Task::Condition, cond("contains", "10.0", "dns"))
            .await
            .condition,
        Some(false)
    );
    assert_eq!(
        run(&store, Task::Condition, cond("equals", "x", "absent"))
            .await
            .condition,
        Some(false)
    );
    assert_eq!(
        run(&store, Task::Condition, cond("notEquals", "x", "absent"))
            .await
            .condition,
        Some(true)
    );
    let r = run(&store, Task::Condition, cond("greaterThan", "1", "dns")).await;
    assert!(
        !r.ok && r.message.contains("numbers or quantities"),
        "{r:?}"
    );
}

#[tokio::test]
async fn labels_change_only_what_differs() {
    let store = Shared::default();
    for n in ["w1", "w2"] {
        store.lock().unwrap().objects.insert(
            format!("/api/v1/nodes/{n}"),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "resourceVersion": "1", "labels": {"role": "worker"}}}),
        );
    }
    let set = json!({"type": "setLabel", "target": {"kind": "Node", "selector": "role=worker"}, "labels": {"dns": "on"}});
    let r = run(&store, Task::Run, set.clone()).await;
    assert!(r.ok && r.changed, "{r:?}");
    assert!(!run(&store, Task::Run, set).await.changed);
    let patch = json!({"type": "patchLabel", "target": {"kind": "Node", "selector": "role=worker"},
                       "fromVar": "zones", "fromVarValue": {"w1": {"zone": "a", "dns": null}}});
    let r = run(&store, Task::Run, patch).await;
    assert!(r.changed, "{r:?}");
    let w1 = store.lock().unwrap().objects["/api/v1/nodes/w1"].clone();
    assert_eq!(
        w1["metadata"]["labels"],
        json!({"role": "worker", "zone": "a"})
    );
    let rm = json!({"type": "removeLabel", "target": {"kind": "Node", "name": "w2"}, "keys": ["dns", "nope"]});
    assert!(run(&store, Task::Run, rm.clone()).await.changed);
    assert!(!run(&store, Task::Run, rm).await.changed);
}

#[tokio::test]
async fn forbidden_names_the_identity_and_the_step() {
    let store = Shared::default();
    store.lock().unwrap().forbidden.push((
        "PATCH".into(),
        "/api/v1/namespaces/ops/configmaps/dns".into(),
    ));
    let r = run(&store, Task::Run, json!({"type": "apply", "manifests": CM})).await;
    assert!(!r.ok);
    assert!(
        r.message.contains("spec.steps[1]: forbidden: serviceaccount ops/runner cannot patch configmaps \"dns\" in namespace ops"),
        "{}", r.message
    );
}

#[tokio::test]
async fn deleting_a_missing_object_is_an_unchanged_success() {
    let store = Shared::default();
    let r = run(
        &store,
        Task::Run,
        json!({"type": "delete", "target": {"kind": "ConfigMap", "name": "gone"}}),
    )
    .await;
    assert!(r.ok && !r.changed, "{r:?}");
}

#[tokio::test]
async fn list_nodes_and_include_from_a_secret() {
    let store = Shared::default();
    {
        let mut s = store.lock().unwrap();
        for (n, l) in [
            ("w2", json!({"role": "worker"})),
            ("cp", json!({})),
            ("w1", json!({"role": "worker"})),
        ] {
            s.objects.insert(
                format!("/api/v1/nodes/{n}"),
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": l}}),
            );
        }
        use std::io::Write;
        let mut b64 = Vec::new();
        write!(b64, "{}", base64(CM.as_bytes())).unwrap();
        s.objects.insert(
            "/api/v1/namespaces/ops/secrets/inc".into(),
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "inc"}, "data": {"doc": String::from_utf8(b64).unwrap()}}),
        );
    }
    let r = run(
        &store,
        Task::ListNodes,
        json!({"type": "loopNodes", "selector": "role=worker", "steps": []}),
    )
    .await;
    assert_eq!(
        r.nodes,
        Some(vec!["w1".to_string(), "w2".to_string()]),
        "{r:?}"
    );
    let inc = json!({"type": "include", "source": {"secretRef": {"name": "inc", "key": "doc"}}});
    let r = run(&store, Task::FetchInclude, inc).await;
    assert_eq!(
        r.include,
        Some(IncludedDocument::Manifests {
            applied: vec!["ConfigMap/ops/dns".into()]
        }),
        "{r:?}"
    );
    assert!(!r.message.contains("169.254"), "{}", r.message);
}

#[tokio::test]
async fn a_wait_already_true_is_answered_by_one_get_with_no_list_or_watch() {
    let store = Shared::default();
    store.lock().unwrap().objects.insert(
        "/api/v1/namespaces/ops/secrets/creds".into(),
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds", "namespace": "ops", "resourceVersion": "3"}}),
    );
    let step = json!({"type": "waitFor", "resource": {"kind": "Secret", "name": "creds"},
        "condition": "Exist"});
    let r = run(&store, Task::Run, step).await;
    assert!(r.ok, "{r:?}");
    let s = store.lock().unwrap();
    assert_eq!((s.listed, s.watched), (0, 0), "one GET said it exists");
}

#[tokio::test]
async fn wait_for_sees_the_initial_list_and_watch_events() {
    let store = Shared::default();
    let pod = |phase: &str, rv: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ops", "resourceVersion": rv}, "status": {"phase": phase}})
    };
    {
        let mut s = store.lock().unwrap();
        s.objects
            .insert("/api/v1/namespaces/ops/pods/p".into(), pod("Pending", "5"));
        s.watch_events
            .push(json!({"type": "MODIFIED", "object": pod("Running", "6")}));
    }
    let step = json!({"type": "waitFor", "resource": {"kind": "Pod", "name": "p"}, "condition": "Custom",
                      "jsonPath": "{.status.phase}", "op": "equals", "value": "Running"});
    let r = run(&store, Task::Run, step).await;
    assert!(r.ok, "{r:?}");
    let gone = json!({"type": "waitFor", "resource": {"kind": "Pod", "name": "q"}, "condition": "Deleted"});
    assert!(run(&store, Task::Run, gone).await.ok);
}

#[tokio::test]
async fn wait_for_timeouts_say_what_was_last_seen() {
    let store = Shared::default();
    store.lock().unwrap().objects.insert(
        "/apis/apps/v1/namespaces/ops/deployments/dns".into(),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dns", "generation": 1,
               "resourceVersion": "3"}, "spec": {"replicas": 2},
               "status": {"observedGeneration": 1, "availableReplicas": 1, "readyReplicas": 1,
                          "updatedReplicas": 2, "replicas": 2}}),
    );
    let mut step = json!({"type": "waitFor", "resource": {"kind": "Deployment", "name": "dns"},
                          "condition": "Available"});
    step["timeoutSeconds"] = json!(1);
    let input_timeout = Some(1);
    let r = run_with_timeout(&store, step, input_timeout).await;
    assert!(!r.ok);
    assert_eq!(
        r.message,
        "timed out after 1s waiting for Deployment/ops/dns to be Available; last seen: Deployment/ops/dns: 1/2 available, 1/2 ready, 2/2 updated"
    );
}

fn base64(data: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
