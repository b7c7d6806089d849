//! The generated CRD on a real API server (testenv): it is accepted as a structural schema with
//! its CEL rules, `kubectl get pf` columns exist, valid example flows are admitted (each in its
//! own version; a v1beta1 flow is stored with `shellQuoting: quoted`), and a step
//! missing a required field is rejected at apply time with the rule's message.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::wait::{await_condition, conditions};

async fn install_crd(client: &kube::Client) {
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&pseudoflow_crd::schema::crd_yaml()).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        "pseudoflows.ops.example.com",
        &PatchParams::apply("crd-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("the API server accepts the CRD");
    let established = await_condition(
        crds,
        "pseudoflows.ops.example.com",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(std::time::Duration::from_secs(30), established)
        .await
        .unwrap()
        .unwrap();
}

fn flows(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("ops.example.com", "v1alpha1", "PseudoFlow"),
        "pseudoflows",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn flow(name: &str, steps: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {"name": name}, "spec": {"steps": steps}
    }))
    .unwrap()
}

#[tokio::test]
async fn the_crd_is_served_and_its_rules_reject_bad_steps_at_apply_time() {
    let env = pseudoflow_testenv::shared().unwrap_or_else(|e| panic!("testenv: {e}"));
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = env.namespace("crd").await.unwrap();
    let api = flows(&client, &ns);
    let beta_api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                pseudoflow_crd::GROUP,
                pseudoflow_crd::quoting::QUOTED_VERSION,
                "PseudoFlow",
            ),
            "pseudoflows",
        ),
    );

    // Every example flow is admitted as written.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let mut admitted = 0;
    for dir in ["examples", "examples/steps", "examples/kopf"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            // `*-crd.yaml`: the CRD of a kind a bound flow serves, beside the flow; no flow.
            if path.extension().is_none_or(|e| e != "yaml")
                || path.to_string_lossy().ends_with("-crd.yaml")
            {
                continue;
            }
            let mut obj: DynamicObject =
                serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            obj.metadata.namespace = None;
            // Each in the version it is written in (the kopf examples are v1beta1).
            let version = obj.types.as_ref().map(|t| t.api_version.clone());
            let beta = Some(format!(
                "{}/{}",
                pseudoflow_crd::GROUP,
                pseudoflow_crd::quoting::QUOTED_VERSION
            ));
            let api = if version == beta { &beta_api } else { &api };
            api.create(&PostParams::default(), &obj)
                .await
                .unwrap_or_else(|e| panic!("{} rejected: {e}", path.display()));
            if version == beta {
                // Stored with v1beta1's default, so it quotes whichever version reads it.
                let name = obj.metadata.name.clone().unwrap_or_default();
                let stored = flows(&client, &ns).get(&name).await.unwrap();
                assert_eq!(stored.data["spec"]["shellQuoting"], "quoted", "{name}");
            }
            admitted += 1;
        }
    }
    assert_eq!(admitted, 40);

    // A sleep without seconds: the CEL rule for `sleep` rejects it, naming the field.
    let err = api
        .create(
            &PostParams::default(),
            &flow("no-seconds", serde_json::json!([{"type": "sleep"}])),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("sleep steps need seconds"), "{msg}");
    // An approval without the name its annotation approves it by.
    let err = api
        .create(
            &PostParams::default(),
            &flow("no-name", serde_json::json!([{"type": "approval"}])),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("approval steps need name"), "{msg}");
    // A setLabel without target: its rule still applies although `target.selector` is open
    // (a string or a structured selector; examples/steps/setLabel.yaml, admitted above, has both).
    let err = api
        .create(
            &PostParams::default(),
            &flow(
                "no-target",
                serde_json::json!([{"type": "setLabel", "labels": {"a": "b"}}]),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("setLabel steps need target, labels"),
        "{err}"
    );
    // An unknown type: the enum rejects it.
    let err = api
        .create(
            &PostParams::default(),
            &flow("bad-type", serde_json::json!([{"type": "aply"}])),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("aply"), "{err}");
    // A wrongly typed field: the schema rejects it.
    let err = api
        .create(
            &PostParams::default(),
            &flow(
                "ten",
                serde_json::json!([{"type": "sleep", "seconds": "ten"}]),
            ),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spec.steps[0].seconds"), "{err}");
    // An enum field whose variants are documented (runOn once lost its enum that way).
    let err = api
        .create(
            &PostParams::default(),
            &flow(
                "sometimes",
                serde_json::json!([{"type": "execNode", "cmd": "true", "runOn": "sometimes"}]),
            ),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spec.steps[0].runOn"), "{err}");
    // Inside `then`/`else` too, without the webhook: an unknown type, a step without one, and
    // a bad enum value are refused at apply time, each named by its path.
    let nested = |name: &str, step: serde_json::Value| {
        flow(
            name,
            serde_json::json!([{"type": "if", "condition": {"op": "exists", "expression": "x"},
                "then": [{"type": "log", "message": "ok"}], "else": [step]}]),
        )
    };
    for (name, step, path) in [
        (
            "nested-type",
            serde_json::json!({"type": "aply"}),
            "spec.steps[0].else[0].type",
        ),
        (
            "nested-untyped",
            serde_json::json!({"manifests": "x"}),
            "spec.steps[0].else[0].type",
        ),
        (
            "nested-enum",
            serde_json::json!({"type": "execNode", "cmd": "true", "runOn": "sometimes"}),
            "spec.steps[0].else[0].runOn",
        ),
        (
            "nested-bound",
            serde_json::json!({"type": "sleep", "seconds": 1, "timeoutSeconds": 0}),
            "spec.steps[0].else[0].timeoutSeconds",
        ),
    ] {
        let err = api
            .create(&PostParams::default(), &nested(name, step))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(path), "{name}: {err}");
    }
    // What the CRD cannot check in nested steps (per-type required fields, anything deeper
    // or in `steps`, which parallel's branches share) passes here; the webhook refuses it.
    api.create(
        &PostParams::default(),
        &nested("nested-open", serde_json::json!({"type": "sleep"})),
    )
    .await
    .unwrap();
}
