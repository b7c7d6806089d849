//! The Helm chart's RBAC is enough and no more, proven on the real API server (testenv).
//!
//! The chart is rendered with `helm template` and applied as is; the process kubelet runs its
//! controller Deployment as the locally built `pseudoflow-controller` binary under the chart's
//! ServiceAccount token, so every API call the controller makes is authorised by the chart's
//! ClusterRole and leader-election Role — nothing else. With the full chart the seed's example
//! flows run to Succeeded. Then, for every rule of those roles, a release with that one rule
//! removed runs a small flow (an object, a node step, a log line), and the test shows something
//! observable breaks: the flow does not succeed, no Events are recorded, or no leader holds the
//! lease, or a flow bound to a kind cannot serve its object, or the webhook stops answering (it
//! must refuse a flow with a typo nested in a loop's `steps:` and let an admin's approval
//! annotation through, which takes a SubjectAccessReview, stamped by the mutating webhook, which
//! answers the API server's client certificate only). The apiserver enforces
//! OwnerReferencesPermissionEnforcement, as hardened clusters do. With `watchNamespaces` set,
//! the controller's identity can neither read a Secret nor impersonate a ServiceAccount in a
//! namespace it does not watch, and still serves flows (bound ones too) in the one it watches.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::wait::await_condition;
use kube::Client;
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_testenv::{apply::apply_text, seed, shared_with, Options, TestEnv};
use serde_json::Value;

const CONTROLLER_IMAGE: &str = "pseudoflow/controller:rbac";
const RUNTIME_IMAGE: &str = "pseudoflow/runtime:rbac";
/// The label that opts a namespace in to node steps (with the chart's `nodeSteps.namespaces`).
const PRIVILEGED: &str = "pod-security.kubernetes.io/enforce: privileged";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A workspace binary next to this test's executable, built if `cargo test` did not build it.
fn binary(package: &str, bin: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().unwrap().parent().unwrap().join(bin);
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-q", "-p", package, "--bin", bin])
            .status()
            .unwrap();
        assert!(ok.success() && path.is_file(), "could not build {bin}");
    }
    path
}

fn env() -> &'static TestEnv {
    let controller = binary("pseudoflow-controller", "pseudoflow-controller");
    let step = binary("pseudoflow-runtime", "pseudoflow-step");
    shared_with(move || {
        let mut o = Options::default();
        o.images.insert(CONTROLLER_IMAGE, controller);
        o.images.insert_runtime(RUNTIME_IMAGE, step);
        o
    })
    .unwrap_or_else(|e| panic!("testenv: {e}"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The chart rendered for `release` in namespace `release`, watching `watch` and allowing node
/// steps in `node_steps`, as YAML documents.
fn render(release: &str, watch: &[&str], node_steps: &[&str]) -> Vec<Value> {
    let (c_repo, c_tag) = CONTROLLER_IMAGE.split_once(':').unwrap();
    let (r_repo, r_tag) = RUNTIME_IMAGE.split_once(':').unwrap();
    let webhook = free_port();
    let mut sets = vec![
        format!("image.controller.repository={c_repo}"),
        format!("image.controller.tag={c_tag}"),
        format!("image.runtime.repository={r_repo}"),
        format!("image.runtime.tag={r_tag}"),
        format!("metrics.port={}", free_port()),
        // No service network here: the API server calls the webhook on the loopback address.
        format!("webhook.port={webhook}"),
        format!("webhook.url=https://127.0.0.1:{webhook}/validate"),
        "webhook.certNames={127.0.0.1}".into(),
        "crds.install=false".into(),
        "logLevel=info".into(),
    ];
    sets.push(format!("watchNamespaces={{{}}}", watch.join(",")));
    sets.push(format!("nodeSteps.namespaces={{{}}}", node_steps.join(",")));
    let ca = env().webhook_client_ca();
    let mut args = vec![
        "--namespace".to_string(),
        release.to_string(),
        // The webhook answers testenv's API server only (its admission client certificate).
        "--set-file".into(),
        format!("webhook.clientAuth.caBundle={}", ca.display()),
    ];
    for s in sets {
        args.extend(["--set".to_string(), s]);
    }
    pseudoflow_test_support::helm::template(release, &args)
}

/// (document index, rule index, a readable name) for every rule of the chart's roles.
fn rules(docs: &[Value]) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (d, doc) in docs.iter().enumerate() {
        if !matches!(doc["kind"].as_str(), Some("ClusterRole" | "Role")) {
            continue;
        }
        for (r, rule) in doc["rules"].as_array().unwrap().iter().enumerate() {
            out.push((
                d,
                r,
                format!(
                    "{} {}: {} {}",
                    doc["kind"].as_str().unwrap(),
                    doc["metadata"]["name"].as_str().unwrap(),
                    rule["resources"],
                    rule["verbs"]
                ),
            ));
        }
    }
    out
}

async fn install(client: &Client, release: &str, docs: &[Value]) {
    apply_text(
        client,
        &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {release}}}\n"),
        None,
    )
    .await
    .unwrap();
    for doc in docs {
        apply_text(client, &serde_json::to_string(doc).unwrap(), None)
            .await
            .unwrap_or_else(|e| panic!("installing {release}: {e}"));
    }
}

/// Waits (by watching) until the flow's phase is final; `None` if it is not within `secs`.
async fn final_phase(client: &Client, ns: &str, name: &str, secs: u64) -> Option<String> {
    final_status(client, ns, name, secs)
        .await
        .and_then(|s| s["phase"].as_str().map(str::to_string))
}

/// The flow's status once its phase is final; `None` if it is not within `secs`.
async fn final_status(client: &Client, ns: &str, name: &str, secs: u64) -> Option<Value> {
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &flow_resource());
    let done = |o: Option<&DynamicObject>| {
        o.and_then(|f| f.data["status"]["phase"].as_str())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
    };
    match tokio::time::timeout(
        Duration::from_secs(secs),
        await_condition(flows, name, done),
    )
    .await
    {
        Ok(Ok(Some(f))) => Some(f.data["status"].clone()),
        _ => None,
    }
}

/// What a release managed to do for a small probe flow.
#[derive(Debug)]
struct Outcome {
    /// Its webhook refused a flow with a typo nested in a loop's `steps:`, naming the path.
    refuses_bad: bool,
    /// Its webhook let an approval by a user who may approve through.
    approves: bool,
    phase: Option<String>,
    /// What status said, to tell why a release failed.
    message: Option<String>,
    events: usize,
    leader: Option<String>,
    /// A flow bound to a kind served an object (its status written back), kept its revision
    /// (a ControllerRevision, with the controller's rights) and let the object go when it was
    /// deleted: done as the flow's ServiceAccount, by impersonation.
    bound: bool,
}

impl Outcome {
    fn all_good(&self) -> bool {
        self.refuses_bad
            && self.approves
            && self.phase.as_deref() == Some("Succeeded")
            && self.events > 0
            && self.leader.is_some()
            && self.bound
    }
}

/// A kind for the bound probe, with a status subresource.
const PROBE_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: probes.rbac.test.example.com}
spec:
  group: rbac.test.example.com
  scope: Namespaced
  names: {kind: Probe, plural: probes, singular: probe, listKind: ProbeList}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

/// Whether, within 45 s each, a flow bound to Probes in `ns` writes `phase: Running` into a
/// Probe's status, its revision is kept (its status names it, counting the Probe), and deleting
/// the Probe lets it go (its flow deleted, its finalizer removed).
async fn bound_probe(client: &Client, release: &str, ns: &str) -> bool {
    apply_text(client, PROBE_CRD, None).await.unwrap();
    let ar = kube::discovery::ApiResource {
        group: "rbac.test.example.com".into(),
        version: "v1".into(),
        api_version: "rbac.test.example.com/v1".into(),
        kind: "Probe".into(),
        plural: "probes".into(),
    };
    let probes: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let served = within(30, || async {
        probes.list(&ListParams::default()).await.is_ok()
    });
    if !served.await {
        return false;
    }
    let flow = format!("apiVersion: ops.example.com/v1alpha1\nkind: PseudoFlow\nmetadata: {{name: bound, namespace: {ns}}}\nspec:\n  bind: {{apiVersion: rbac.test.example.com/v1, kind: Probe}}\n  steps: [{{type: log, message: served}}]\n");
    let object = format!("apiVersion: rbac.test.example.com/v1\nkind: Probe\nmetadata: {{name: p, namespace: {ns}}}\nspec: {{x: 1}}\n");
    if apply_text(client, &flow, None).await.is_err()
        || apply_text(client, &object, None).await.is_err()
    {
        return false;
    }
    let running = within(45, || async {
        probes
            .get_opt("p")
            .await
            .ok()
            .flatten()
            .is_some_and(|p| p.data["status"]["phase"] == "Running")
    });
    if !running.await {
        eprintln!("{release}: the bound flow never wrote Running into its object's status");
        return false;
    }
    // Its revision kept (a ControllerRevision the controller makes with its own rights) and
    // counted in its status.
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &flow_resource());
    let revision = within(30, || async {
        flows
            .get_opt("bound")
            .await
            .ok()
            .flatten()
            .is_some_and(|f| {
                let b = &f.data["status"]["bound"];
                b["currentRevision"].is_string() && b["revisions"][0]["objects"] == 1
            })
    });
    if !revision.await {
        eprintln!("{release}: the bound flow's revision was never kept");
        return false;
    }
    let _ = probes.delete("p", &Default::default()).await;
    let gone = within(45, || async {
        matches!(probes.get_opt("p").await, Ok(None))
    })
    .await;
    if !gone {
        eprintln!("{release}: a deleted object of the bound flow was never let go");
    }
    gone
}

/// Whether `check` holds within `secs` (asked every 500 ms).
async fn within<F, Fut>(secs: u64, check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// Installs `docs` as `release`, watching namespace `release`-flows, and runs the probe flow there.
async fn trial(client: &Client, release: &str, docs: &[Value]) -> Outcome {
    let ns = format!("{release}-flows");
    // The probe's execNode needs the namespace opted in: labelled here, allow-listed by render().
    apply_text(client, &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{{PRIVILEGED}}}}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {ns}-flows}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: ServiceAccount, name: default, namespace: {ns}}}]\n"), None).await.unwrap();
    install(client, release, docs).await;
    let flow = format!(
        r#"apiVersion: ops.example.com/v1alpha1
kind: PseudoFlow
metadata: {{name: probe, namespace: {ns}}}
spec:
  steps:
    - type: apply
      manifests: |
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: probe-applied, namespace: {ns}}}
        data: {{by: probe}}
    - type: execNode
      nodeSelector: node-role.kubernetes.io/control-plane
      cmd: "true"
    # A result over the termination message's 4 KiB: the executor stores it in a result
    # ConfigMap, which the controller reads (the chart's `configmaps: get`).
    - type: exec
      cmd: "head -c 6000 /dev/zero | tr '\\0' x"
      var: big
    - type: log
      message: probe done
"#
    );
    let refuses_bad = webhook_refuses(client, &ns, 45).await;
    // Created once the webhook answers (failure policy Fail: refused until then).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Err(e) = apply_text(client, &flow, None).await {
        if tokio::time::Instant::now() > deadline {
            eprintln!("{release}: the probe flow was never accepted: {e:#}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // An approval decision by a user who may approve (the admin) is let through: the webhook
    // asked the API server (a SubjectAccessReview), and the mutating webhook stamped it with the
    // key from the Secret the controller made in its namespace.
    let approves = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &flow_resource())
        .patch(
            "probe",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!(
                {"metadata": {"annotations": {"ops.example.com/approve": "none"}}}
            )),
        )
        .await
        .map_err(|e| eprintln!("{release}: the admin's approval was refused: {e}"))
        .is_ok_and(|f| {
            let stamped = f
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key("ops.example.com/approved-by"));
            if !stamped {
                eprintln!("{release}: the admin's approval was not stamped");
            }
            stamped
        });
    let status = final_status(client, &ns, "probe", 45).await;
    let phase = status
        .as_ref()
        .and_then(|s| s["phase"].as_str().map(str::to_string));
    let message = status.and_then(|s| s["message"].as_str().map(str::to_string));
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some("probe"))
        .count();
    let leader = Api::<Lease>::namespaced(client.clone(), release)
        .get_opt("pseudoflow-controller")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty());
    let bound = bound_probe(client, release, &ns).await;
    Outcome {
        refuses_bad,
        approves,
        phase,
        message,
        events,
        leader,
        bound,
    }
}

/// Whether, within `secs`, the release's webhook refuses (server-side dry run) a flow in `ns`
/// with a typo nested inside a loop's `steps:`, naming its path. False if it still lets it
/// through or does not answer when the time is up.
async fn webhook_refuses(client: &Client, ns: &str, secs: u64) -> bool {
    let flows: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &flow_resource());
    let bad: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "ops.example.com/v1alpha1",
        "kind": "PseudoFlow",
        "metadata": {"name": "typo", "namespace": ns},
        "spec": {"steps": [{"type": "loop", "forEach": ["a"], "steps": [{"type": "lgo"}]}]},
    }))
    .unwrap();
    let params = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match flows.create(&params, &bad).await {
            // Let through: the API server has not seen the configuration yet; asked again.
            Ok(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Ok(_) => {
                eprintln!("{ns}: the webhook let a flow with a typo through");
                return false;
            }
            Err(kube::Error::Api(e))
                if e.message.contains("denied the request")
                    && e.message.contains("spec.steps[0].steps[0].type") =>
            {
                return true
            }
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Err(e) => {
                eprintln!("{ns}: the webhook never refused: {e}");
                return false;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chart_rbac_runs_the_seed_flows_and_every_rule_is_needed() {
    let env = env();
    let client = env.client().await.unwrap();
    seed::prepare(env, &client, repo()).await.unwrap();
    // The seed's node steps run in kube-system: its half of the opt-in (the chart allow-lists it).
    let kube_system = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: kube-system, labels: {{{PRIVILEGED}}}}}\n");
    apply_text(&client, &kube_system, None).await.unwrap();

    // The full chart: the seed flows as written, and the probe flow, succeed.
    let mut watch: Vec<&str> = seed::SEED_NAMESPACES.to_vec();
    watch.push("pf-full-flows");
    let full = render("pf-full", &watch, &["kube-system", "pf-full-flows"]);
    let names = seed::apply_flows(&client, repo()).await.unwrap();
    let probe = trial(&client, "pf-full", &full).await;
    assert!(
        probe.all_good(),
        "with the full chart the probe flow must succeed with Events under a leader: {probe:?}; \
         status said: {}",
        probe.message.as_deref().unwrap_or("nothing")
    );
    for (ns, name) in &names {
        let phase = final_phase(&client, ns, name, 180).await;
        assert_eq!(
            phase.as_deref(),
            Some("Succeeded"),
            "seed flow {ns}/{name} under the chart's RBAC"
        );
    }

    // The seed's §10 example did its work: every node had no `zone` label, and now has the one
    // the exec-output loop set (through kubectl in the step pod, under the flow's identity).
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(nodes.items.len(), 3);
    for n in &nodes.items {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("zone").map(String::as_str),
            Some("auto"),
            "node {:?}",
            n.metadata.name
        );
    }

    // Every rule removed in turn: something the probe checks breaks. The rules are those of a
    // trial's release (one watched namespace: its Secrets and ServiceAccounts by a Role there).
    let rules = rules(&render("pf-cut", &["pf-cut-flows"], &["pf-cut-flows"]));
    assert!(rules.len() >= 8, "rules found: {rules:?}");
    let trials = rules.iter().enumerate().map(|(i, (d, r, what))| {
        let client = client.clone();
        let release = format!("pf-cut{i}");
        let flows = format!("{release}-flows");
        let mut docs = render(&release, &[&flows], &[&flows]);
        docs[*d]["rules"].as_array_mut().unwrap().remove(*r);
        async move { (what.clone(), trial(&client, &release, &docs).await) }
    });
    let results = join_all(trials).await;
    let mut unneeded = Vec::new();
    for (what, outcome) in &results {
        eprintln!("without {what}: {outcome:?}");
        if outcome.all_good() {
            unneeded.push(what.clone());
        }
    }
    assert!(
        unneeded.is_empty(),
        "these rules can be removed and everything still works, so they are not least privilege: {unneeded:?}"
    );
}

/// Whether `user` may `verb` `resource` in `ns` (Jobs in `batch`, the rest in the core group),
/// as the API server's authorizer answers (asked as the admin).
async fn may(client: &Client, user: &str, verb: &str, resource: &str, ns: &str) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.into()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(if resource == "jobs" { "batch" } else { "" }.into()),
                resource: Some(resource.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&Default::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// A client configuration authenticated as ServiceAccount `name` of `ns` (a token from the
/// TokenRequest API).
async fn config_as(client: &Client, ns: &str, name: &str) -> kube::Config {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let req: TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let token = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(name, &Default::default(), &req)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let kubeconfig = kube::config::Kubeconfig::read_from(env().kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    config
}

/// Reads Secret `name` of `ns` with `config`, impersonating `as_user` when given: the HTTP
/// status of the refusal (None: read) and its message.
async fn read_secret(
    config: &kube::Config,
    as_user: Option<String>,
    ns: &str,
    name: &str,
) -> (Option<u16>, String) {
    let mut config = config.clone();
    config.auth_info.impersonate = as_user;
    let api: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(Client::try_from(config).unwrap(), ns);
    match api.get(name).await {
        Ok(_) => (None, String::new()),
        Err(kube::Error::Api(e)) => (Some(e.code), e.message),
        Err(e) => (Some(0), e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_watch_namespaces_secrets_and_impersonation_reach_the_watched_namespace_only() {
    let env = env();
    let client = env.client().await.unwrap();
    // The CRDs (the chart is rendered without them).
    seed::prepare(env, &client, repo()).await.unwrap();
    let (release, watched, other) = ("pf-scoped", "pf-scoped-flows", "pf-scoped-other");
    // An unwatched namespace with a Secret, and a ServiceAccount there that may read it.
    let setup = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {other}}}\n---\n\
         apiVersion: v1\nkind: Secret\nmetadata: {{name: db, namespace: {other}}}\n\
         stringData: {{password: hunter2}}\n---\n\
         apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: reader, namespace: {other}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\n\
         metadata: {{name: reader, namespace: {other}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}}\n\
         subjects: [{{kind: ServiceAccount, name: reader, namespace: {other}}}]\n"
    );
    apply_text(&client, &setup, None).await.unwrap();
    let docs = render(release, &[watched], &[watched]);
    // The watched namespace's flows run, a bound one included (impersonation works there).
    let outcome = trial(&client, release, &docs).await;
    assert!(
        outcome.all_good(),
        "flows in the watched namespace: {outcome:?}"
    );
    let account = "pf-scoped-pseudoflow";
    let me = format!("system:serviceaccount:{release}:{account}");
    for (verb, resource) in [
        ("get", "secrets"),
        ("create", "secrets"),
        ("update", "secrets"),
        ("impersonate", "serviceaccounts"),
        ("create", "jobs"),
        ("list", "pods"),
    ] {
        assert!(
            may(&client, &me, verb, resource, watched).await,
            "{verb} {resource} in the watched {watched}"
        );
        for ns in [other, "default", "kube-system"] {
            assert!(
                !may(&client, &me, verb, resource, ns).await,
                "{verb} {resource} in the unwatched {ns}"
            );
        }
    }
    // Acting as the controller: the Secret is refused, and so is becoming `reader`, who may
    // read it; impersonating the watched namespace's account works.
    let config = config_as(&client, release, account).await;
    let (code, why) = read_secret(&config, None, other, "db").await;
    assert_eq!(code, Some(403), "{why}");
    let reader = Some(format!("system:serviceaccount:{other}:reader"));
    let (code, why) = read_secret(&config, reader, other, "db").await;
    assert_eq!(code, Some(403), "{why}");
    assert!(why.contains("impersonate"), "{why}");
    let flow_account = Some(format!("system:serviceaccount:{watched}:default"));
    let (code, why) = read_secret(&config, flow_account, watched, "absent").await;
    assert_eq!(code, Some(404), "impersonating {watched}'s account: {why}");
}
