//! `plan`: what a run would change, by server-side dry-run under the flow's ServiceAccount.
//!
//! Previewed: `apply` (inline manifests), `applyFile`/`deleteFile` (files from ConfigMap
//! artifact sources), `delete`, `setLabel`, `removeLabel`, `copy`. Every other step that changes
//! objects (`include`, `includeFlow`, `patchLabel`, files from URLs) is listed as undetermined
//! with the reason, as is any step whose input uses a value known only at run time. Node steps are listed
//! per target node.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context as _};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope};
use kube::Client;
use serde_json::{json, Value};
use similar::TextDiff;

use pseudoflow_crd::protocol::FIELD_MANAGER;
use pseudoflow_crd::steps::copy::COPIED_FROM;
use pseudoflow_crd::steps::registry::plan_as;
use pseudoflow_crd::steps::{Nesting, PlanAs, Preview};

use crate::cluster;
use crate::Global;

/// What plan does with a step of type `ty` (the type's own `StepParams::plan_as`); a name that
/// is no step type changes nothing plan could show.
fn planned_as(ty: &str) -> PlanAs {
    plan_as(ty).unwrap_or(PlanAs::NoChange)
}

/// Where the plan stands.
#[derive(Default)]
struct Report {
    changes: usize,
    errors: usize,
    undetermined: usize,
}

struct Planner {
    sa_client: Client,
    namespace: String,
    vars: BTreeMap<String, String>,
    /// Variables set by steps at run time, with the path of the step that sets them.
    runtime_vars: BTreeMap<String, String>,
    artifacts: Vec<Value>,
    discovery: Option<Discovery>,
    report: Report,
}

/// `kubectl pf plan NAME` or `kubectl pf plan -f FILE`; returns the exit code.
pub async fn plan(
    g: &Global,
    name: Option<&str>,
    file: Option<&std::path::Path>,
) -> anyhow::Result<u8> {
    let me = cluster::connect(g, None).await?;
    let flows: Vec<Value> = match (name, file) {
        (Some(n), _) => vec![serde_json::to_value(cluster::flow(&me, n).await?)?],
        (None, Some(path)) => read_flows(path)?,
        (None, None) => bail!("give a flow NAME or -f FILE"),
    };
    // Every flow of the file; the exit code is the worst of them.
    let mut code = 0;
    for (i, flow) in flows.iter().enumerate() {
        if i > 0 {
            outln!();
        }
        match plan_one(g, &me, flow).await {
            Ok(c) => code = code.max(c),
            Err(e) => {
                eprintln!("error: {e:#}");
                code = 2;
            }
        }
    }
    Ok(code)
}

/// Plans one flow; returns its exit code.
async fn plan_one(g: &Global, me: &cluster::Kube, flow: &Value) -> anyhow::Result<u8> {
    let namespace = flow["metadata"]["namespace"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| me.namespace.clone());
    let flow_name = flow["metadata"]["name"].as_str().unwrap_or("").to_string();
    let spec = &flow["spec"];
    let sa = spec["serviceAccountName"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    check_impersonation(&me.client, &namespace, &sa).await?;
    let user = format!("system:serviceaccount:{namespace}:{sa}");
    let sa_kube = cluster::connect(g, Some(user.clone())).await?;
    outln!("plan for pseudoflow {namespace}/{flow_name} as {user} (server-side dry-run)");
    let vars = spec["vars"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let artifacts = match spec["artifacts"].as_array() {
        Some(a) if !a.is_empty() => a.clone(),
        _ => vec![json!({"configMap": pseudoflow_crd::spec::DEFAULT_ARTIFACTS_CONFIGMAP})],
    };
    let mut p = Planner {
        sa_client: sa_kube.client,
        namespace,
        vars,
        runtime_vars: BTreeMap::new(),
        artifacts,
        discovery: None,
        report: Report::default(),
    };
    let steps = spec["steps"].as_array().cloned().unwrap_or_default();
    p.steps(&steps, "spec.steps", None, None).await;
    let r = &p.report;
    outln!(
        "\n{} change(s), {} undetermined step(s), {} error(s)",
        r.changes,
        r.undetermined,
        r.errors
    );
    Ok(if r.errors > 0 {
        2
    } else if r.changes > 0 {
        1
    } else {
        0
    })
}

/// The PseudoFlow documents of `path` (`-`: stdin).
fn read_flows(path: &std::path::Path) -> anyhow::Result<Vec<Value>> {
    use serde::Deserialize;
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let mut flows = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).with_context(|| format!("parsing {}", path.display()))?;
        if v["kind"] == "PseudoFlow" {
            flows.push(v);
        }
    }
    if flows.is_empty() {
        bail!("{} holds no PseudoFlow", path.display())
    }
    Ok(flows)
}

/// Refuses clearly when the caller may not impersonate the flow's ServiceAccount.
async fn check_impersonation(client: &Client, ns: &str, sa: &str) -> anyhow::Result<()> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("impersonate".into()),
                resource: Some("serviceaccounts".into()),
                namespace: Some(ns.into()),
                name: Some(sa.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .context("asking the API server whether you may impersonate the flow's ServiceAccount")?;
    if answer.status.is_some_and(|s| s.allowed) {
        return Ok(());
    }
    Err(anyhow!(
        "refused: you may not impersonate ServiceAccount {ns}/{sa}. plan computes the changes \
         with the flow's own rights, so it needs `impersonate` on `serviceaccounts` named {sa:?} \
         in namespace {ns:?} (see docs/cli.md#plan)"
    ))
}

/// `${name}` replaced by spec vars; Err(reason) when a value is known only at run time.
fn substitute(
    s: &str,
    vars: &BTreeMap<String, String>,
    runtime: &BTreeMap<String, String>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[i..]);
            return Ok(out);
        };
        let expr = after[..end].trim();
        match vars.get(expr) {
            Some(v) => out.push_str(v),
            None => {
                return Err(match runtime.get(expr) {
                    Some(by) => format!("uses ${{{expr}}}, set at run time by {by}"),
                    None => format!("uses ${{{expr}}}, known only at run time"),
                })
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn substitute_value(
    v: &Value,
    vars: &BTreeMap<String, String>,
    runtime: &BTreeMap<String, String>,
) -> Result<Value, String> {
    Ok(match v {
        Value::String(s) => Value::String(substitute(s, vars, runtime)?),
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| substitute_value(x, vars, runtime))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(m) => {
            let mut o = serde_json::Map::new();
            for (k, x) in m {
                o.insert(
                    substitute(k, vars, runtime)?,
                    substitute_value(x, vars, runtime)?,
                );
            }
            Value::Object(o)
        }
        other => other.clone(),
    })
}

/// An object without what the server owns: managed fields, status, identity, versions.
fn clean(mut v: Value) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "selfLink",
        ] {
            m.remove(k);
        }
        if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
            if a.is_empty() {
                m.remove("annotations");
            }
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

/// Secret values replaced by `***` (a value the plan changes by `*** (changed)`), keys kept.
fn mask(before: &mut Value, after: &mut Value) {
    let is_secret = |v: &Value| v["kind"] == "Secret";
    if !is_secret(before) && !is_secret(after) {
        return;
    }
    let existed = !before.is_null();
    let old = before.get("data").cloned().unwrap_or(Value::Null);
    for field in ["data", "stringData"] {
        if let Some(m) = before.get_mut(field).and_then(Value::as_object_mut) {
            for (_, v) in m.iter_mut() {
                *v = json!("***");
            }
        }
        if let Some(m) = after.get_mut(field).and_then(Value::as_object_mut) {
            for (k, v) in m.iter_mut() {
                let changed = existed && old.get(k) != Some(v);
                *v = json!(if changed { "*** (changed)" } else { "***" });
            }
        }
    }
}

/// A label selector (`"a=b,!c"` or `{matchLabels, matchExpressions}`) as the API's string form;
/// None when it cannot be written so.
fn selector_string(sel: &Value) -> Option<String> {
    match sel {
        Value::Null => Some(String::new()),
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => {
            let mut parts = Vec::new();
            if let Some(labels) = m.get("matchLabels").and_then(Value::as_object) {
                for (k, v) in labels {
                    parts.push(format!("{k}={}", v.as_str()?));
                }
            }
            for e in m
                .get("matchExpressions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let key = e["key"].as_str()?;
                let values = || {
                    e["values"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                        .unwrap_or_default()
                };
                parts.push(match e["operator"].as_str()? {
                    "In" => format!("{key} in ({})", values()),
                    "NotIn" => format!("{key} notin ({})", values()),
                    "Exists" => key.to_string(),
                    "DoesNotExist" => format!("!{key}"),
                    _ => return None,
                });
            }
            Some(parts.join(","))
        }
        _ => None,
    }
}

fn yaml(v: &Value) -> String {
    if v.is_null() {
        String::new()
    } else {
        serde_yaml::to_string(v).unwrap_or_default()
    }
}

impl Planner {
    fn undetermined(&mut self, path: &str, ty: &str, why: &str) {
        self.report.undetermined += 1;
        outln!("\n{path} ({ty}): undetermined — {why}");
    }

    fn error(&mut self, path: &str, ty: &str, what: &str, e: impl std::fmt::Display) {
        self.report.errors += 1;
        outln!("\n{path} ({ty}) {what}: error — {e}");
    }

    async fn resolve(
        &mut self,
        api_version: Option<&str>,
        kind: &str,
    ) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
        if self.discovery.is_none() {
            self.discovery = Some(Discovery::new(self.sa_client.clone()).run().await?);
        }
        let d = self.discovery.as_ref().expect("just set");
        for group in d.groups() {
            for (ar, caps) in group.recommended_resources() {
                let version_ok = match api_version {
                    Some(av) => ar.api_version == av,
                    None => true,
                };
                if ar.kind == kind && version_ok {
                    return Ok((ar, caps));
                }
            }
            if let Some(av) = api_version {
                for (ar, caps) in group.versioned_resources(av.rsplit('/').next().unwrap_or(av)) {
                    if ar.kind == kind && ar.api_version == av {
                        return Ok((ar, caps));
                    }
                }
            }
        }
        bail!(
            "the API server serves no kind {kind:?}{}",
            api_version.map(|a| format!(" in {a}")).unwrap_or_default()
        )
    }

    fn api(
        &self,
        ar: &ApiResource,
        caps: &ApiCapabilities,
        ns: Option<&str>,
    ) -> Api<DynamicObject> {
        match caps.scope {
            Scope::Cluster => Api::all_with(self.sa_client.clone(), ar),
            Scope::Namespaced => {
                Api::namespaced_with(self.sa_client.clone(), ns.unwrap_or(&self.namespace), ar)
            }
        }
    }

    /// Prints the diff of one object and counts it.
    fn show(&mut self, path: &str, ty: &str, what: &str, before: Value, after: Value) {
        let mut before = clean(before);
        let mut after = clean(after);
        mask(&mut before, &mut after);
        let verdict = match (before.is_null(), after.is_null()) {
            (true, false) => "added",
            (false, true) => "deleted",
            _ if before == after => "unchanged",
            _ => "changed",
        };
        outln!("\n{path} ({ty}) {what}: {verdict}");
        if verdict == "unchanged" {
            return;
        }
        self.report.changes += 1;
        let (a, b) = (yaml(&before), yaml(&after));
        let diff = TextDiff::from_lines(&a, &b);
        out!(
            "{}",
            diff.unified_diff()
                .context_radius(3)
                .header(&format!("live {what}"), &format!("planned {what}"))
        );
    }

    async fn apply_object(&mut self, path: &str, ty: &str, obj: Value) {
        let kind = obj["kind"].as_str().unwrap_or("").to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let av = obj["apiVersion"].as_str().map(str::to_string);
        let ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
        let what = format!(
            "{kind} {}{name}",
            ns.as_ref().map(|n| format!("{n}/")).unwrap_or_default()
        );
        let (ar, caps) = match self.resolve(av.as_deref(), &kind).await {
            Ok(r) => r,
            Err(e) => return self.error(path, ty, &what, e),
        };
        let what = match caps.scope {
            Scope::Cluster => format!("{kind} {name}"),
            Scope::Namespaced => {
                format!("{kind} {}/{name}", ns.as_deref().unwrap_or(&self.namespace))
            }
        };
        let api = self.api(&ar, &caps, ns.as_deref());
        let live = match api.get_opt(&name).await {
            Ok(o) => o.map(|o| serde_json::to_value(o).unwrap_or_default()),
            Err(e) => return self.error(path, ty, &what, format!("reading it: {e}")),
        };
        let planned = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force().dry_run(),
                &Patch::Apply(&obj),
            )
            .await;
        match planned {
            Ok(o) => self.show(
                path,
                ty,
                &what,
                live.unwrap_or(Value::Null),
                serde_json::to_value(o).unwrap_or_default(),
            ),
            Err(e) => self.error(path, ty, &what, format!("server-side dry-run: {e}")),
        }
    }

    async fn delete_object(
        &mut self,
        path: &str,
        ty: &str,
        api_version: Option<&str>,
        kind: &str,
        name: &str,
        ns: Option<&str>,
    ) {
        let (ar, caps) = match self.resolve(api_version, kind).await {
            Ok(r) => r,
            Err(e) => return self.error(path, ty, &format!("{kind} {name}"), e),
        };
        let what = match caps.scope {
            Scope::Cluster => format!("{kind} {name}"),
            Scope::Namespaced => format!("{kind} {}/{name}", ns.unwrap_or(&self.namespace)),
        };
        let api = self.api(&ar, &caps, ns);
        let live = match api.get_opt(name).await {
            Ok(o) => o,
            Err(e) => return self.error(path, ty, &what, format!("reading it: {e}")),
        };
        let Some(live) = live else {
            outln!("\n{path} ({ty}) {what}: absent, nothing to delete");
            return;
        };
        let dp = DeleteParams {
            dry_run: true,
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => self.show(
                path,
                ty,
                &what,
                serde_json::to_value(live).unwrap_or_default(),
                Value::Null,
            ),
            Err(e) => self.error(path, ty, &what, format!("server-side dry-run delete: {e}")),
        }
    }

    /// The text of artifact file `file` from the flow's ConfigMap sources.
    async fn artifact(&self, file: &str) -> Result<String, String> {
        for src in &self.artifacts {
            if let Some(cm) = src["configMap"].as_str() {
                let api = Api::<ConfigMap>::namespaced(self.sa_client.clone(), &self.namespace);
                match api.get_opt(cm).await {
                    Ok(Some(c)) => {
                        if let Some(t) = c.data.as_ref().and_then(|d| d.get(file)) {
                            return Ok(t.clone());
                        }
                    }
                    Ok(None) => {}
                    Err(e) => return Err(format!("reading ConfigMap {cm}: {e}")),
                }
            } else if src["url"].is_string() {
                return Err(format!(
                    "{file} may come from a URL source, which plan does not fetch"
                ));
            }
        }
        Err(format!("no artifact source holds {file}"))
    }

    async fn nodes(&self, selector: &Value) -> Vec<String> {
        let Some(sel) = selector_string(selector) else {
            return Vec::new();
        };
        let sel = sel.as_str();
        let api = Api::<Node>::all(self.sa_client.clone());
        cluster::names(&api, &ListParams::default().labels(sel)).await
    }

    /// Walks `steps` (at `base`), `nodes` being the loopNodes targets around them and `cond` the
    /// run-time choice they sit behind.
    fn steps<'a>(
        &'a mut self,
        steps: &'a [Value],
        base: &'a str,
        nodes: Option<&'a [String]>,
        cond: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut guard: Option<String> = None;
            for (i, step) in steps.iter().enumerate() {
                let path = format!("{base}[{i}]");
                // `when` guards the step after it.
                let this_cond = guard.take();
                if planned_as(step["type"].as_str().unwrap_or("")) == PlanAs::GuardsNext {
                    guard = Some(format!("the when at {path} holds at run time"));
                }
                self.step(step, &path, nodes, this_cond.as_deref().or(cond))
                    .await;
            }
        })
    }

    /// One step: notes the variables it sets, then hands it to the walker of its kind (a
    /// compound step's children, a node step's targets, or an object-changing step's preview).
    async fn step(
        &mut self,
        step: &Value,
        path: &str,
        nodes: Option<&[String]>,
        cond: Option<&str>,
    ) {
        let ty = step["type"].as_str().unwrap_or("?").to_string();
        self.note_runtime_vars(step, path, &ty);
        if planned_as(&ty) == PlanAs::Nested(Nesting::Branches) {
            return self.parallel(step, path, nodes, cond).await;
        }
        if self.compound(step, path, &ty, nodes, cond).await {
            return;
        }
        if self.node_step(step, path, &ty, nodes).await {
            return;
        }
        self.object_step(step, path, &ty, cond).await;
    }

    /// Records the variables `step` sets at run time, so that later steps reading them are
    /// reported as undetermined rather than previewed with a wrong value.
    fn note_runtime_vars(&mut self, step: &Value, path: &str, ty: &str) {
        for key in ["var", "outputVar", "register"] {
            if let Some(v) = step[key].as_str() {
                self.runtime_vars
                    .insert(v.to_string(), format!("{path} ({ty})"));
            }
        }
    }

    /// A `parallel` step: each branch walked as a list of steps of its own.
    async fn parallel(
        &mut self,
        step: &Value,
        path: &str,
        nodes: Option<&[String]>,
        cond: Option<&str>,
    ) {
        let branches = step["steps"].as_array().cloned().unwrap_or_default();
        for (j, branch) in branches.iter().enumerate() {
            let list = branch.as_array().cloned().unwrap_or_default();
            self.steps(&list, &format!("{path}.steps[{j}]"), nodes, cond)
                .await;
        }
    }

    /// The nested steps of a compound step (`if`, `loop`, `loopNodes`, `onError`, ...), walked
    /// with the run-time condition or loop targets they sit behind. False if `step` has none.
    async fn compound(
        &mut self,
        step: &Value,
        path: &str,
        ty: &str,
        nodes: Option<&[String]>,
        cond: Option<&str>,
    ) -> bool {
        let nested: Vec<(&str, &Vec<Value>)> = ["steps", "then", "else", "do", "catch"]
            .iter()
            .filter_map(|k| step[*k].as_array().map(|a| (*k, a)))
            .filter(|(_, a)| a.iter().all(|s| s.get("type").is_some()))
            .collect();
        if nested.is_empty() {
            return false;
        }
        let nesting = match planned_as(ty) {
            PlanAs::Nested(n) => Some(n),
            _ => None,
        };
        let loop_nodes = if nesting == Some(Nesting::EachNode) {
            Some(self.nodes(&step["selector"]).await)
        } else {
            None
        };
        let why = match nesting {
            Some(Nesting::Branch) => {
                Some(format!("the {ty} at {path} takes this branch at run time"))
            }
            Some(Nesting::Items) => Some(format!("the items of {ty} {path}")),
            Some(Nesting::OnError) => Some(format!("a step before the {ty} at {path} fails")),
            Some(Nesting::Always | Nesting::EachNode | Nesting::Branches) | None => None,
        };
        for (key, list) in nested {
            let inner_nodes = loop_nodes.as_deref().or(nodes);
            let inner_cond = why.as_deref().or(cond);
            self.steps(list, &format!("{path}.{key}"), inner_nodes, inner_cond)
                .await;
        }
        true
    }

    /// A node step is not previewed, only listed with the nodes it runs on. False if `step` is
    /// not one (`deleteFile` is one only in a node context: it then removes a file on nodes).
    async fn node_step(
        &mut self,
        step: &Value,
        path: &str,
        ty: &str,
        nodes: Option<&[String]>,
    ) -> bool {
        let node_context = nodes.is_some() || step.get("nodeSelector").is_some();
        let on_nodes = match planned_as(ty) {
            PlanAs::OnNodes => true,
            PlanAs::OnNodesInNodeContext(_) => node_context,
            _ => false,
        };
        if !on_nodes {
            return false;
        }
        let targets = match (nodes, step.get("nodeSelector")) {
            (Some(n), _) => n.to_vec(),
            (None, Some(sel)) => self.nodes(sel).await,
            (None, None) => Vec::new(),
        };
        let what = step["path"].as_str().unwrap_or("");
        outln!("\n{path} ({ty}) {what}: a node step, not previewed; runs on:");
        for n in &targets {
            outln!("  node {n}");
        }
        if targets.is_empty() {
            outln!("  (the node its loop or selector picks at run time)");
        }
        true
    }

    /// A step that may change objects: previewed by dry-run when its input is known now,
    /// otherwise reported as undetermined with the reason. Other steps change no object.
    async fn object_step(&mut self, step: &Value, path: &str, ty: &str, cond: Option<&str>) {
        let preview = match planned_as(ty) {
            PlanAs::Undetermined(why) => return self.undetermined(path, ty, why),
            PlanAs::Preview(p) | PlanAs::OnNodesInNodeContext(p) => p,
            // Changes no object (waitFor, exec, log, sleep, eval, ...); the others are walked or
            // listed before this.
            PlanAs::NoChange | PlanAs::Nested(_) | PlanAs::GuardsNext | PlanAs::OnNodes => return,
        };
        if let Some(c) = cond {
            self.undetermined(path, ty, &format!("it runs only if {c}"));
            return;
        }
        let step = match substitute_value(step, &self.vars, &self.runtime_vars) {
            Ok(s) => s,
            Err(why) => return self.undetermined(path, ty, &why),
        };
        match preview {
            Preview::Apply => self.apply_step(path, ty, &step).await,
            Preview::ApplyFile | Preview::DeleteFile => {
                self.file_step(path, ty, &step, preview).await
            }
            Preview::Delete => self.delete_step(path, ty, &step).await,
            Preview::SetLabel => {
                let patch = json!({"metadata": {"labels": step["labels"]}});
                self.label(path, ty, &step, patch).await
            }
            Preview::RemoveLabel => {
                let patch = remove_labels_patch(&step);
                self.label(path, ty, &step, patch).await
            }
            Preview::Copy => self.copy(path, ty, &step).await,
        }
    }

    /// An `apply` step: each of its inline manifests applied by dry-run.
    async fn apply_step(&mut self, path: &str, ty: &str, step: &Value) {
        match pseudoflow_crd::steps::apply::manifest_objects(&step["manifests"]) {
            Ok(objs) => {
                for o in objs {
                    self.apply_object(path, ty, o).await;
                }
            }
            Err(e) => self.error(path, ty, "manifests", e),
        }
    }

    /// An `applyFile` or `deleteFile` step: the objects of an artifact file, each applied or
    /// deleted by dry-run. A file plan cannot read, or one using run-time values, is undetermined.
    async fn file_step(&mut self, path: &str, ty: &str, step: &Value, preview: Preview) {
        let file = step["path"].as_str().unwrap_or("");
        let body = match self.artifact(file).await {
            Ok(b) => b,
            Err(why) => return self.undetermined(path, ty, &why),
        };
        let objs = match pseudoflow_crd::steps::apply::manifest_objects(&json!(body)) {
            Ok(o) => o,
            Err(e) => return self.error(path, ty, file, e),
        };
        // `${...}` in a file is substituted in its parsed string values, as the executor
        // does.
        let objs = match objs
            .iter()
            .map(|o| substitute_value(o, &self.vars, &self.runtime_vars))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(o) => o,
            Err(why) => return self.undetermined(path, ty, &format!("{file} {why}")),
        };
        for o in objs {
            if preview == Preview::ApplyFile {
                self.apply_object(path, ty, o).await;
            } else {
                self.delete_object(
                    path,
                    ty,
                    o["apiVersion"].as_str(),
                    o["kind"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or(""),
                    o["metadata"]["namespace"].as_str(),
                )
                .await;
            }
        }
    }

    /// A `delete` step: its target deleted by dry-run.
    async fn delete_step(&mut self, path: &str, ty: &str, step: &Value) {
        let t = &step["target"];
        self.delete_object(
            path,
            ty,
            t["apiVersion"].as_str(),
            t["kind"].as_str().unwrap_or(""),
            t["name"].as_str().unwrap_or(""),
            t["namespace"].as_str(),
        )
        .await;
    }

    /// A `copy` step as the executor does it (runtime-image/src/steps/copy.rs): the source's
    /// data (the selected keys, renamed) server-side applied to each target by `pseudoflow-copy`.
    async fn copy(&mut self, path: &str, ty: &str, step: &Value) {
        let kind = step["from"]["kind"]
            .as_str()
            .unwrap_or("Secret")
            .to_string();
        let src_ns = step["from"]["namespace"]
            .as_str()
            .unwrap_or(&self.namespace)
            .to_string();
        let src_name = step["from"]["name"].as_str().unwrap_or("").to_string();
        let (ar, caps) = match self.resolve(Some("v1"), &kind).await {
            Ok(r) => r,
            Err(e) => return self.error(path, ty, &kind, e),
        };
        let source = self.api(&ar, &caps, Some(&src_ns));
        let src = match source.get_opt(&src_name).await {
            Ok(Some(o)) => serde_json::to_value(o).unwrap_or_default(),
            Ok(None) => {
                let why = format!("its source {kind} {src_ns}/{src_name} does not exist (yet)");
                return self.undetermined(path, ty, &why);
            }
            Err(e) => return self.error(path, ty, &format!("{kind} {src_ns}/{src_name}"), e),
        };
        let data = copied_data(&kind, &src, step);
        for t in step["to"].as_array().into_iter().flatten() {
            let ns = t["namespace"].as_str().unwrap_or("");
            let name = t["name"].as_str().unwrap_or(&src_name);
            let mut body = json!({
                "apiVersion": "v1",
                "kind": kind,
                "metadata": {"name": name, "namespace": ns,
                    "annotations": {COPIED_FROM: format!("{src_ns}/{src_name}")}},
            });
            body.as_object_mut()
                .expect("an object")
                .extend(data.clone());
            let target = self.api(&ar, &caps, Some(ns));
            let what = format!("{kind} {ns}/{name}");
            if !self.copy_to(path, ty, &what, &target, name, &body).await {
                return;
            }
        }
    }

    /// One target of a `copy`: `body` applied to it by dry-run as `pseudoflow-copy`, and the
    /// diff shown. False when the live object cannot be read, which ends the step's preview.
    async fn copy_to(
        &mut self,
        path: &str,
        ty: &str,
        what: &str,
        target: &Api<DynamicObject>,
        name: &str,
        body: &Value,
    ) -> bool {
        let live = match target.get_opt(name).await {
            Ok(o) => o.map(|o| serde_json::to_value(o).unwrap_or_default()),
            Err(e) => {
                self.error(path, ty, what, format!("reading it: {e}"));
                return false;
            }
        };
        let params = PatchParams::apply("pseudoflow-copy").force().dry_run();
        match target.patch(name, &params, &Patch::Apply(body)).await {
            Ok(o) => self.show(
                path,
                ty,
                what,
                live.unwrap_or(Value::Null),
                serde_json::to_value(o).unwrap_or_default(),
            ),
            Err(e) => self.error(path, ty, what, format!("server-side dry-run: {e}")),
        }
        true
    }

    /// A label step: `patch` (a merge patch of `metadata.labels`) on each target, dry-run.
    async fn label(&mut self, path: &str, ty: &str, step: &Value, patch: Value) {
        let t = &step["target"];
        let kind = t["kind"].as_str().unwrap_or("");
        let (ar, caps) = match self.resolve(t["apiVersion"].as_str(), kind).await {
            Ok(r) => r,
            Err(e) => return self.error(path, ty, kind, e),
        };
        let api = self.api(&ar, &caps, t["namespace"].as_str());
        if t["name"].is_null() && selector_string(&t["selector"]).is_none() {
            return self.undetermined(path, ty, "its target selector is not understood by plan");
        }
        let targets = match (t["name"].as_str(), &t["selector"]) {
            (Some(n), _) => match api.get_opt(n).await {
                Ok(o) => o.into_iter().collect(),
                Err(e) => return self.error(path, ty, kind, e),
            },
            (None, _) => match api
                .list(
                    &ListParams::default()
                        .labels(&selector_string(&t["selector"]).unwrap_or_else(|| "!".into())),
                )
                .await
            {
                Ok(l) => l.items,
                Err(e) => return self.error(path, ty, kind, e),
            },
        };
        for mut o in targets {
            // A LIST's items carry no apiVersion/kind; the planned object does.
            o.types = Some(kube::api::TypeMeta {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
            });
            let name = o.metadata.name.clone().unwrap_or_default();
            let what = match &o.metadata.namespace {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            };
            match api
                .patch(
                    &name,
                    &PatchParams::default().dry_run(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(after) => self.show(
                    path,
                    ty,
                    &what,
                    serde_json::to_value(o).unwrap_or_default(),
                    serde_json::to_value(after).unwrap_or_default(),
                ),
                Err(e) => self.error(path, ty, &what, format!("server-side dry-run: {e}")),
            }
        }
    }
}

/// The merge patch of a `removeLabel` step: each of its keys set to null.
fn remove_labels_patch(step: &Value) -> Value {
    let keys: serde_json::Map<String, Value> = step["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|k| (k.to_string(), Value::Null))
        .collect();
    json!({"metadata": {"labels": keys}})
}

/// What a `copy` step carries from its source `src` (a `kind` object) to each target: the
/// selected keys (renamed by `as`) of `data` (and `binaryData` for a ConfigMap), and a Secret's
/// `type`.
fn copied_data(kind: &str, src: &Value, step: &Value) -> serde_json::Map<String, Value> {
    let fields: &[&str] = if kind == "Secret" {
        &["data"]
    } else {
        &["data", "binaryData"]
    };
    let keys: Vec<(String, String)> = step["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|k| {
            let key = k["key"].as_str()?.to_string();
            let to = k["as"].as_str().unwrap_or(&key).to_string();
            Some((key, to))
        })
        .collect();
    let mut data = serde_json::Map::new();
    for field in fields {
        let Some(all) = src[*field].as_object() else {
            continue;
        };
        let picked: serde_json::Map<String, Value> = if keys.is_empty() {
            all.clone()
        } else {
            keys.iter()
                .filter_map(|(k, to)| all.get(k).map(|v| (to.clone(), v.clone())))
                .collect()
        };
        if !picked.is_empty() {
            data.insert(field.to_string(), Value::Object(picked));
        }
    }
    if kind == "Secret" && !src["type"].is_null() {
        data.insert("type".into(), src["type"].clone());
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        [("greeting".to_string(), "hi".to_string())].into()
    }

    #[test]
    fn spec_vars_are_substituted_and_run_time_values_named() {
        let runtime = [("out".to_string(), "spec.steps[1] (exec)".to_string())].into();
        assert_eq!(
            substitute("say ${ greeting }!", &vars(), &runtime),
            Ok("say hi!".into())
        );
        assert_eq!(
            substitute("${out}", &vars(), &runtime),
            Err("uses ${out}, set at run time by spec.steps[1] (exec)".into())
        );
        assert_eq!(
            substitute("${item}", &vars(), &runtime),
            Err("uses ${item}, known only at run time".into())
        );
    }

    #[test]
    fn secret_values_are_masked_and_changes_marked() {
        let mut before = json!({"kind": "Secret", "data": {"a": "MQ==", "b": "Mg=="}});
        let mut after = json!({"kind": "Secret", "data": {"a": "MQ==", "b": "Mw==", "c": "NA=="}});
        mask(&mut before, &mut after);
        assert_eq!(before["data"], json!({"a": "***", "b": "***"}));
        assert_eq!(
            after["data"],
            json!({"a": "***", "b": "*** (changed)", "c": "*** (changed)"})
        );
        let mut none = Value::Null;
        let mut new = json!({"kind": "Secret", "data": {"a": "MQ=="}});
        mask(&mut none, &mut new);
        assert_eq!(
            new["data"],
            json!({"a": "***"}),
            "a new Secret: nothing to compare"
        );
    }

    #[test]
    fn selectors_are_written_as_the_api_reads_them() {
        assert_eq!(selector_string(&json!("!zone")), Some("!zone".into()));
        assert_eq!(
            selector_string(
                &json!({"matchLabels": {"zone": "auto"}, "matchExpressions": [
                    {"key": "cp", "operator": "DoesNotExist"},
                    {"key": "tier", "operator": "In", "values": ["a", "b"]}
                ]})
            ),
            Some("zone=auto,!cp,tier in (a,b)".into())
        );
        assert_eq!(selector_string(&json!(3)), None);
    }

    #[test]
    fn server_owned_fields_are_left_out() {
        let v = clean(
            json!({"metadata": {"name": "x", "managedFields": [], "resourceVersion": "1",
            "uid": "u", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "status": {"a": 1}}),
        );
        assert_eq!(v, json!({"metadata": {"name": "x"}}));
    }
}
