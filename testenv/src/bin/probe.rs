//! `testenv-probe VERB RESOURCE [NAMESPACE]`: one API call with the pod's own identity
//! (in-cluster config), exit 0 if allowed, 3 if Forbidden (403), 1 otherwise. Lets tests prove
//! that RBAC is enforced for pods by the real API server.

use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args).await {
        Ok(()) => 0,
        Err(kube::Error::Api(e)) if e.code == 403 => {
            let _ = std::fs::write("/dev/termination-log", format!("forbidden: {}", e.message));
            eprintln!("forbidden: {}", e.message);
            3
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    };
    std::process::exit(code);
}

async fn run(args: &[String]) -> Result<(), kube::Error> {
    let client = kube::Client::try_default().await?;
    let (verb, resource) = (
        args.first().map(String::as_str).unwrap_or("list"),
        args.get(1).map(String::as_str).unwrap_or("pods"),
    );
    let ns = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let (group, version, kind) = match resource {
        "nodes" => ("", "v1", "Node"),
        "secrets" => ("", "v1", "Secret"),
        "configmaps" => ("", "v1", "ConfigMap"),
        _ => ("", "v1", "Pod"),
    };
    let ar = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: version.into(),
        kind: kind.into(),
        plural: resource.into(),
    };
    let api: Api<DynamicObject> = if resource == "nodes" {
        Api::all_with(client, &ar)
    } else {
        Api::namespaced_with(client, &ns, &ar)
    };
    match verb {
        "list" => api.list(&ListParams::default()).await.map(|_| ()),
        other => {
            eprintln!("unsupported verb {other}");
            std::process::exit(2);
        }
    }
}
