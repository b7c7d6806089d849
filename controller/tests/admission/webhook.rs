//! The validating admission webhook, called by the real kube-apiserver of testenv: the controller
//! makes its CA and serving certificate, stores them in a Secret, writes the CA into the
//! ValidatingWebhookConfiguration (`url:` client config to its loopback address), and then
//! `kubectl apply` and `kubectl apply --dry-run=server` refuse a flow with typos nested inside a
//! loop's `steps:` (where the CRD schema cannot reach), every problem with its path. Also the
//! cert-manager path (mounted certificate files, an injected caBundle).

use std::sync::Arc;
use std::time::Duration;

use crate::common::admission::{self, editor_and_approver, kubectl_async, webhook_entry};
use crate::common::*;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use pseudoflow_controller::http::{self, tls};
use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::webhook::Webhook;
use serde_json::{json, Value};

/// A webhook server for `ns` on a free loopback port, registered in a configuration named after
/// the namespace that only matches flows there; returns the configuration's name.
async fn start_webhook(client: &Client, ns: &str) -> (String, tls::SelfSigned) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let name = register_webhook(client, ns, port, None).await;
    let cfg = admission::self_signed(ns, &name);
    serve_webhook(client, listener, http::WebhookCert::SelfSigned(cfg.clone()));
    (name, cfg)
}

/// Registers `https://127.0.0.1:port/validate` for flows in `ns`, with `ca_bundle` as its CA
/// when given (as cert-manager's CA injector would write it); returns the configuration's name.
async fn register_webhook(client: &Client, ns: &str, port: u16, ca_bundle: Option<&str>) -> String {
    let name = format!("pseudoflow-{ns}");
    let mut vwc: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [webhook_entry(port, ns, "validate")],
    }))
    .unwrap();
    if let Some(ca) = ca_bundle {
        let webhook = &mut vwc.webhooks.as_mut().unwrap()[0];
        webhook.client_config.ca_bundle = Some(ByteString(ca.as_bytes().to_vec()));
    }
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &vwc)
        .await
        .unwrap();
    name
}

/// Serves the controller's validating webhook on `listener` with `cert`.
fn serve_webhook(client: &Client, listener: tokio::net::TcpListener, cert: http::WebhookCert) {
    admission::serve(client, listener, Webhook::new(client.clone()), cert);
}

/// `kubectl` with `args`, `yaml` on stdin (off the runtime).
async fn kubectl_stdin(args: &[&str], yaml: String) -> (bool, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child =
            std::process::Command::new(pseudoflow_testenv::binaries::bin_dir().join("kubectl"))
                .arg("--kubeconfig")
                .arg(env().kubeconfig_path())
                .args(&args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    })
    .await
    .unwrap()
}

fn flow_json(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "ops.example.com/v1alpha1",
        "kind": "PseudoFlow",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

fn flow_yaml(ns: &str, name: &str, spec: Value) -> String {
    serde_yaml::to_string(&flow_json(ns, name, spec)).unwrap()
}

/// Three typos inside a loop's `steps:`, where the CRD schema cannot reach: four problems (the
/// misspelt `message` is unknown, and `message` is missing), each with its path.
fn bad_spec() -> Value {
    json!({"serviceAccountName": "flow", "steps": [
        {"type": "loop", "forEach": ["a"], "steps": [
            {"type": "sleep", "seconds": "ten"},
            {"type": "aply", "manifests": []},
            {"type": "log", "mesage": "hi"}
        ]}
    ]})
}

/// Waits until the API server calls the webhook (its configuration and CA have propagated):
/// a server-side dry run of a bad flow is refused by it.
async fn wait_webhook_active(ns: &str) {
    let yaml = flow_yaml(ns, "probe", bad_spec());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) =
            kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], yaml.clone()).await;
        if !ok && out.contains("denied the request") {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhook never refused: {ok} {out}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_and_server_dry_run_refuse_a_nested_typo_with_every_path_and_a_valid_flow_passes(
) {
    let (client, ns) = prepare("webhook", json!([]), json!([])).await;
    let ctl = start_controller(&client, &ns);
    // A flow from before the webhook, already invalid: its status and metadata stay writable.
    create_flow(&client, &ns, "legacy", bad_spec()).await;
    let legacy = wait_done(&client, &ns, "legacy", 30).await;
    assert_eq!(legacy["phase"], "Failed", "{legacy:#}");

    let (vwc, _) = start_webhook(&client, &ns).await;
    wait_webhook_active(&ns).await;

    let bad = flow_yaml(&ns, "bad", bad_spec());
    for args in [
        &["apply", "-f", "-"][..],
        &["apply", "--dry-run=server", "-f", "-"][..],
        &["create", "-f", "-"][..],
    ] {
        let (ok, out) = kubectl_stdin(args, bad.clone()).await;
        eprintln!("kubectl {args:?}:\n{out}");
        assert!(!ok, "kubectl {args:?} accepted a bad flow: {out}");
        for needle in [
            "admission webhook \"pseudoflows.ops.example.com\" denied the request",
            "PseudoFlow \"bad\" is invalid (4 problems)",
            "spec.steps[0].steps[0].seconds: ",
            "spec.steps[0].steps[1].type: ",
            "spec.steps[0].steps[2].mesage: unknown field (did you mean \"message\"?)",
            "spec.steps[0].steps[2]: missing required field \"message\"",
        ] {
            assert!(
                out.contains(needle),
                "kubectl {args:?}: no {needle:?} in:\n{out}"
            );
        }
    }
    assert!(
        flows(&client, &ns).get_opt("bad").await.unwrap().is_none(),
        "nothing was stored"
    );

    // A valid flow passes and runs: the controller's own status writes are not blocked.
    let good = flow_yaml(
        &ns,
        "good",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "loop", "forEach": ["a"], "steps": [{"type": "log", "message": "hi"}]}
        ]}),
    );
    let (ok, out) = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], good.clone()).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl_stdin(&["apply", "-f", "-"], good).await;
    assert!(ok, "{out}");
    let st = wait_done(&client, &ns, "good", 30).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");

    // What the webhook adds to a create (server-side dry runs, in this namespace and in one
    // it does not match): printed, not asserted (timing on a shared machine).
    let (_, other) = prepare("webhook-none", json!([]), json!([])).await;
    for namespace in [&ns, &other] {
        let api = flows(&client, namespace);
        let mut obj: kube::api::DynamicObject = serde_json::from_value(flow_json(
            namespace,
            "timed",
            json!({"steps": [{"type": "loop", "forEach": ["a"], "steps": [{"type": "log", "message": "hi"}]}]}),
        ))
        .unwrap();
        obj.metadata.namespace = Some(namespace.clone());
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let start = std::time::Instant::now();
        for _ in 0..50 {
            api.create(&params, &obj).await.unwrap();
        }
        eprintln!(
            "dry-run create in {namespace} ({}): {:?} each",
            if *namespace == ns {
                "webhook"
            } else {
                "no webhook"
            },
            start.elapsed() / 50
        );
    }

    // Breaking the good flow by an update is refused too.
    let (ok, out) = kubectl_async(&[
        "patch",
        "pf",
        "good",
        "-n",
        &ns,
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/steps/0/steps/0/type","value":"lgo"}]"#,
    ])
    .await;
    assert!(
        !ok && out.contains("spec.steps[0].steps[0].type: "),
        "{out}"
    );

    // The invalid flow from before: a status update, a label and its deletion all pass.
    let (ok, out) = kubectl_async(&[
        "patch",
        "pf",
        "legacy",
        "-n",
        &ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"message":"written by hand"}}"#,
    ])
    .await;
    assert!(ok, "status update blocked: {out}");
    let (ok, out) = kubectl_async(&["label", "pf", "legacy", "-n", &ns, "team=a"]).await;
    assert!(ok, "label blocked: {out}");
    flows(&client, &ns)
        .delete("legacy", &DeleteParams::default())
        .await
        .unwrap();

    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&vwc, &DeleteParams::default())
        .await
        .unwrap();
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_is_stored_reused_and_rotated_with_both_cas_trusted() {
    let (client, ns) = prepare("webhook-tls", json!([]), json!([])).await;
    let (vwc, cfg) = start_webhook(&client, &ns).await;
    wait_webhook_active(&ns).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let stored = secrets.get(&cfg.secret).await.unwrap();
    let first = tls::Bundle::from_secret(&stored).expect("a whole bundle in the Secret");
    assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let ca_bundle = |v: &ValidatingWebhookConfiguration| {
        String::from_utf8(
            v.webhooks.as_ref().unwrap()[0]
                .client_config
                .ca_bundle
                .clone()
                .unwrap()
                .0,
        )
        .unwrap()
    };
    assert_eq!(ca_bundle(&vwcs.get(&vwc).await.unwrap()), first.ca_pem);

    // A restart reuses it.
    let again = cfg.ensure(&client, tls::unix_now()).await.unwrap();
    assert_eq!(again, first);

    // Close to expiry it is renewed: the new CA is trusted beside the old one.
    let later = first.not_after - tls::VALIDITY_SECONDS / 4;
    let renewed = cfg.ensure(&client, later).await.unwrap();
    assert_ne!(renewed.ca_pem, first.ca_pem);
    assert_ne!(renewed.cert_pem, first.cert_pem);
    let bundle = ca_bundle(&vwcs.get(&vwc).await.unwrap());
    assert!(bundle.starts_with(&renewed.ca_pem), "{bundle}");
    assert!(bundle.contains(&first.ca_pem), "{bundle}");
    assert_eq!(
        tls::Bundle::from_secret(&secrets.get(&cfg.secret).await.unwrap()),
        Some(renewed.clone())
    );
    // The server still serves the first certificate (its keeper checks hourly): the API server
    // trusts it through the old CA, still in the bundle.
    wait_webhook_active(&ns).await;

    // The keys are never in an Event of the namespace.
    let events = kubectl_async(&["get", "events", "-n", &ns, "-o", "yaml"])
        .await
        .1;
    assert!(!events.contains("PRIVATE KEY"), "{events}");

    vwcs.delete(&vwc, &DeleteParams::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_user_who_may_approve_can_set_the_approve_or_reject_annotation() {
    let (client, ns) = prepare("webhook-approve", json!([]), json!([])).await;
    editor_and_approver(&client, &ns).await;
    let (vwc, _) = start_webhook(&client, &ns).await;
    wait_webhook_active(&ns).await;
    let spec = json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "hi"}]});

    // The tenant may create and edit the flow...
    let (ok, out) = kubectl_stdin(
        &["apply", "--as=tenant", "-f", "-"],
        flow_yaml(&ns, "gated", spec.clone()),
    )
    .await;
    assert!(ok, "the tenant may edit: {out}");
    let (ok, out) = kubectl_async(&[
        "annotate",
        "pf",
        "gated",
        "-n",
        &ns,
        "--as=tenant",
        "team=a",
    ])
    .await;
    assert!(ok, "{out}");
    // ...but not approve or reject it, by annotate or by a dry run.
    for (what, extra) in [
        ("ops.example.com/approve=gate", None),
        ("ops.example.com/reject=gate", None),
        ("ops.example.com/approve=gate", Some("--dry-run=server")),
    ] {
        let mut args = vec!["annotate", "pf", "gated", "-n", &ns, "--as=tenant", what];
        args.extend(extra);
        let (ok, out) = kubectl_async(&args).await;
        assert!(!ok, "the tenant set {what}: {out}");
        assert!(
            out.contains("tenant may not") && out.contains("\"approve\" verb on pseudoflows"),
            "{out}"
        );
    }
    // Nor create a flow that arrives already approved.
    let mut pre = flow_json(&ns, "pre", spec.clone());
    pre["metadata"]["annotations"] = json!({"ops.example.com/approve": "gate"});
    let pre_yaml = serde_yaml::to_string(&pre).unwrap();
    let (ok, out) = kubectl_stdin(&["create", "--as=tenant", "-f", "-"], pre_yaml.clone()).await;
    assert!(!ok && out.contains("tenant may not approve"), "{out}");
    assert!(flows(&client, &ns).get_opt("pre").await.unwrap().is_none());

    // The approver may, on an existing flow and on a new one.
    let (ok, out) = kubectl_async(&[
        "annotate",
        "pf",
        "gated",
        "-n",
        &ns,
        "--as=boss",
        "ops.example.com/approve=gate",
    ])
    .await;
    assert!(ok, "the approver was refused: {out}");
    let (ok, out) = kubectl_stdin(&["create", "--as=boss", "-f", "-"], pre_yaml).await;
    assert!(ok, "{out}");
    // Once set, the tenant may still edit other things (the decision is not theirs to repeat)...
    let (ok, out) = kubectl_async(&[
        "annotate",
        "pf",
        "gated",
        "-n",
        &ns,
        "--as=tenant",
        "--overwrite",
        "team=b",
    ])
    .await;
    assert!(ok, "{out}");
    // ...but not change it.
    let (ok, out) = kubectl_async(&[
        "annotate",
        "pf",
        "gated",
        "-n",
        &ns,
        "--as=tenant",
        "--overwrite",
        "ops.example.com/approve=other",
    ])
    .await;
    assert!(!ok && out.contains("tenant may not approve"), "{out}");

    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&vwc, &DeleteParams::default())
        .await
        .unwrap();
}

/// Completes a TLS handshake with `127.0.0.1:port` trusting only the CA `ca_pem`.
async fn handshake(port: u16, ca_pem: &str) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let sock = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, sock)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_server_switches_to_the_renewed_certificate_before_the_old_one_expires() {
    let (client, ns) = prepare("webhook-rotate", json!([]), json!([])).await;
    // Valid 6 s: renewed once less than 2 s are left.
    let cfg = tls::SelfSigned {
        namespace: ns.clone(),
        secret: "short-lived".into(),
        webhook_configuration: None,
        names: vec!["127.0.0.1".into()],
        validity: 6,
    };
    let first = cfg.ensure(&client, tls::unix_now()).await.unwrap();
    let current = tls::Current::new(first.certified_key().unwrap());
    tokio::spawn(cfg.clone().keep(
        client.clone(),
        current.clone(),
        first.clone(),
        Duration::from_millis(300),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let state = http::State::new(Arc::new(Metrics::default()));
    tokio::spawn(http::serve_tls(
        listener,
        http::router(state),
        current,
        None,
    ));
    handshake(port, &first.ca_pem).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let stored = tls::Bundle::from_secret(&secrets.get(&cfg.secret).await.unwrap()).unwrap();
        if stored != first && handshake(port, &stored.ca_pem).await.is_ok() {
            // The new certificate is served, before the first one expired.
            assert!(tls::unix_now() <= first.not_after, "renewed too late");
            assert!(
                handshake(port, &first.ca_pem).await.is_err(),
                "still the old one"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never served a renewed certificate"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The chart's `webhook.certManager.enabled` path, with the test playing cert-manager: the
/// serving certificate comes from mounted files (`--webhook-cert-dir`), the CA injector writes
/// the caBundle. The controller serves those files, makes no certificate or Secret of its own,
/// never writes the caBundle, and serves a renewal written in place without a restart.
/// (cert-manager itself is not installed here: no registry to pull it from.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_cert_manager_the_mounted_certificate_is_served_and_its_renewal_picked_up() {
    let (client, ns) = prepare("webhook-cm", json!([]), json!([])).await;
    let names = vec!["127.0.0.1".to_string()];
    let issue = |dir: &std::path::Path| {
        let b = tls::Bundle::generate(&names, tls::unix_now(), tls::VALIDITY_SECONDS).unwrap();
        // What cert-manager puts in its Secret (tls.crt, tls.key, ca.crt), mounted as files.
        for (key, value) in b.to_secret("cert-manager", "issued").data.unwrap() {
            std::fs::write(dir.join(key), value.0).unwrap();
        }
        b
    };
    let dir = std::env::temp_dir().join(format!("pf-cert-manager-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let first = issue(&dir);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let vwc = register_webhook(&client, &ns, port, Some(&first.ca_pem)).await;
    serve_webhook(
        &client,
        listener,
        http::WebhookCert::Files {
            dir: dir.clone(),
            reload_every: Duration::from_millis(300),
        },
    );
    wait_webhook_active(&ns).await;
    handshake(port, &first.ca_pem).await.unwrap();

    // Nothing of the self-signed path: no Secret made, the injected caBundle left as it was.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let made: Vec<String> = secrets
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.type_.as_deref() == Some("kubernetes.io/tls"))
        .filter_map(|s| s.metadata.name)
        .collect();
    assert!(made.is_empty(), "the controller made TLS Secrets: {made:?}");
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let injected = |v: ValidatingWebhookConfiguration| {
        v.webhooks.unwrap()[0]
            .client_config
            .ca_bundle
            .clone()
            .unwrap()
            .0
    };
    assert_eq!(
        injected(vwcs.get(&vwc).await.unwrap()),
        first.ca_pem.as_bytes()
    );

    // cert-manager renews (here with a new CA, the harder case) and its injector trusts both
    // CAs; the files change in place and the running server switches to them.
    let mut both = first.ca_pem.clone();
    let renewed = issue(&dir);
    both.push_str(&renewed.ca_pem);
    vwcs.patch(
        &vwc,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(json!({"webhooks": [{"name": "pseudoflows.ops.example.com",
            "clientConfig": {"caBundle": ByteString(both.into_bytes())}}]})),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while handshake(port, &renewed.ca_pem).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the renewed files were never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        handshake(port, &first.ca_pem).await.is_err(),
        "still the old one"
    );
    wait_webhook_active(&ns).await;
    vwcs.delete(&vwc, &DeleteParams::default()).await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue #34: executor pod settings a flow author must not choose never reach a pod. What is
/// not offered (`hostNetwork`, a privileged `securityContext`) is refused by kubectl's strict
/// field validation against the CRD schema, naming the field, and dropped by the API server
/// when validation is off (so never stored); a key the controller selects by is refused by the
/// webhook, naming its path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_settings_a_flow_author_must_not_choose_are_refused_or_never_stored() {
    let (client, ns) = prepare("webhook-executor", json!([]), json!([])).await;
    let (vwc, _) = start_webhook(&client, &ns).await;
    wait_webhook_active(&ns).await;
    let spec = |executor: Value| {
        json!({"serviceAccountName": "flow", "options": {"executor": executor},
            "steps": [{"type": "log", "message": "hi"}]})
    };
    let host = spec(json!({"hostNetwork": true, "securityContext": {"privileged": true}}));
    let (ok, out) = kubectl_stdin(
        &["apply", "--dry-run=server", "-f", "-"],
        flow_yaml(&ns, "host", host.clone()),
    )
    .await;
    assert!(!ok, "accepted: {out}");
    for field in [
        "spec.options.executor.hostNetwork",
        "spec.options.executor.securityContext",
    ] {
        assert!(out.contains(field), "no {field} in:\n{out}");
    }
    // Without validation the API server prunes what the schema does not have.
    let (ok, out) = kubectl_stdin(
        &["apply", "--validate=false", "-f", "-"],
        flow_yaml(&ns, "host", host),
    )
    .await;
    assert!(ok, "{out}");
    let stored = flows(&client, &ns).get("host").await.unwrap().data["spec"]["options"].clone();
    assert!(
        stored["executor"].get("hostNetwork").is_none()
            && stored["executor"].get("securityContext").is_none(),
        "stored: {stored:#}"
    );
    let owned = spec(json!({"labels": {"app.kubernetes.io/managed-by": "me"}}));
    for args in [
        &["apply", "--dry-run=server", "-f", "-"][..],
        &["apply", "--validate=false", "-f", "-"][..],
    ] {
        let (ok, out) = kubectl_stdin(args, flow_yaml(&ns, "owned", owned.clone())).await;
        assert!(!ok, "kubectl {args:?} accepted: {out}");
        assert!(
            out.contains("denied the request")
                && out.contains("spec.options.executor.labels.app.kubernetes.io/managed-by: "),
            "kubectl {args:?}:\n{out}"
        );
    }
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&vwc, &DeleteParams::default())
        .await
        .unwrap();
}
