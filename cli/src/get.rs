//! `list` and `get [-w]`: what status already carries, as a table and as a tree.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::{watcher, WatchStreamExt};
use pseudoflow_crd::protocol::journal::{journal_name, Entry, JOURNAL_KEY};
use pseudoflow_crd::protocol::{
    label_value, ATTEMPT_ANNOTATION, INSTANCE_ANNOTATION, LABEL_FLOW, LABEL_RUN, NODE_ID_ANNOTATION,
};
use pseudoflow_crd::{PseudoFlowStatus, StepStatus};

use crate::cluster::{flow, flows, status, Kube};
use crate::show::{duration, header, human, phase, table};
use crate::{print_objects, Output};

/// `kubectl pf list`.
pub async fn list(k: &Kube, all: bool, output: Option<Output>) -> anyhow::Result<()> {
    let ns = (!all).then_some(k.namespace.as_str());
    let mut items = flows(&k.client, ns)
        .list(&ListParams::default())
        .await?
        .items;
    items.sort_by_key(|f| (f.metadata.namespace.clone(), f.metadata.name.clone()));
    if let Some(o) = output {
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        return print_objects(&list, o);
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut rows = vec![[
        "NAMESPACE".to_string(),
        "NAME".into(),
        "PHASE".into(),
        "LAST RUN".into(),
        "DURATION".into(),
        "PROGRESS".into(),
        "MESSAGE".into(),
    ]];
    for f in &items {
        let st = status(f);
        let run = st.run.as_ref();
        rows.push([
            f.metadata.namespace.clone().unwrap_or_default(),
            f.metadata.name.clone().unwrap_or_default(),
            phase(&st),
            run.and_then(|r| r.started_at.as_ref())
                .or(st.last_run_time.as_ref())
                .map(|t| format!("{} ago", human(now.as_second() - t.0.as_second())))
                .unwrap_or_else(|| "-".into()),
            run.map(|r| duration(r.started_at.as_ref(), r.finished_at.as_ref(), now))
                .unwrap_or_else(|| "-".into()),
            progress(&st),
            st.message.clone().unwrap_or_default(),
        ]);
    }
    out!("{}", table(&rows));
    Ok(())
}

/// Steps done of the current run; for a bound flow, its objects whose latest run succeeded.
fn progress(st: &PseudoFlowStatus) -> String {
    match (&st.bound, &st.progress) {
        (Some(b), _) => format!("{}/{} objects", b.running, b.objects),
        (None, Some(p)) => p.clone(),
        (None, None) => "-".into(),
    }
}

/// The executor Jobs of the flow's current run, by DAG node id.
pub async fn run_jobs(
    k: &Kube,
    name: &str,
    st: &PseudoFlowStatus,
) -> anyhow::Result<BTreeMap<String, Vec<Job>>> {
    let mut out: BTreeMap<String, Vec<Job>> = BTreeMap::new();
    let Some(run) = &st.run else { return Ok(out) };
    let sel = format!("{LABEL_FLOW}={},{LABEL_RUN}={}", label_value(name), run.id);
    let mut jobs = Api::<Job>::namespaced(k.client.clone(), &k.namespace)
        .list(&ListParams::default().labels(&sel))
        .await?
        .items;
    jobs.sort_by_key(|j| {
        (
            j.metadata.creation_timestamp.as_ref().map(|t| t.0),
            j.metadata.name.clone(),
        )
    });
    for j in jobs {
        let id = annotation(&j, NODE_ID_ANNOTATION);
        out.entry(id).or_default().push(j);
    }
    Ok(out)
}

/// An annotation of a Job ("" when absent).
pub fn annotation(j: &Job, key: &str) -> String {
    j.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or_default()
}

/// The pods of Job `job`, oldest first.
pub async fn job_pods(k: &Kube, job: &str) -> anyhow::Result<Vec<Pod>> {
    let mut pods = Api::<Pod>::namespaced(k.client.clone(), &k.namespace)
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await?
        .items;
    pods.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    Ok(pods)
}

/// How deep a step sits: `spec.steps[3]` is 0, `spec.steps[3].then[0]` is 1.
fn depth(path: &str) -> usize {
    path.matches('[').count().saturating_sub(1)
}

fn step_label(s: &StepStatus) -> String {
    match &s.name {
        Some(n) => format!("{n} ({})", s.step_type),
        None => format!("{} ({})", s.id, s.step_type),
    }
}

/// One row of the step table `get` prints.
type Row = [String; 6];

/// The run as a tree, the text `get` prints.
pub async fn render(k: &Kube, f: &DynamicObject) -> anyhow::Result<String> {
    let name = f.metadata.name.clone().unwrap_or_default();
    let st = status(f);
    if st.bound.is_some() {
        return crate::bound::render(k, f, &st).await;
    }
    let now = k8s_openapi::jiff::Timestamp::now();
    let jobs = run_jobs(k, &name, &st).await?;
    let covered = fused_members(k, &jobs).await;
    let mut out = header(&k.namespace, &name, &st, now);
    let mut rows = vec![[
        "STEP".to_string(),
        "PHASE".into(),
        "DURATION".into(),
        "ATTEMPT".into(),
        "JOB/POD".into(),
        "MESSAGE".into(),
    ]];
    for s in &st.steps {
        rows.extend(step_rows(k, s, &jobs, &covered, now).await?);
    }
    if rows.len() > 1 {
        out.push_str(&table(&rows));
    } else {
        out.push_str("no step has run yet\n");
    }
    if let Some(n) = st.steps_omitted {
        let _ = writeln!(out, "({n} more steps omitted from status)");
    }
    Ok(out)
}

/// The rows of one step: its own, then (for node instances and loop iterations) one per Job.
/// A step with a single Job shows it in its own row, as does a fused member the Job of its
/// segment's head.
async fn step_rows(
    k: &Kube,
    s: &StepStatus,
    jobs: &BTreeMap<String, Vec<Job>>,
    covered: &BTreeMap<String, Job>,
    now: k8s_openapi::jiff::Timestamp,
) -> anyhow::Result<Vec<Row>> {
    let indent = "  ".repeat(depth(&s.path));
    let step_jobs = jobs.get(&s.id).map(Vec::as_slice).unwrap_or_default();
    let single = step_jobs.len() == 1 && s.instances.is_none();
    let job_cell = if single {
        job_pod(k, &step_jobs[0]).await?
    } else if let Some(head) = covered.get(&s.id).filter(|_| step_jobs.is_empty()) {
        job_pod(k, head).await?
    } else {
        "-".into()
    };
    let node = s
        .node
        .as_ref()
        .map(|n| format!(" @{n}"))
        .unwrap_or_default();
    let mut rows = vec![[
        format!("{indent}{}{node}", step_label(s)),
        format!("{:?}", s.phase),
        duration(s.started_at.as_ref(), s.finished_at.as_ref(), now),
        s.attempt
            .map(|a| a.to_string())
            .unwrap_or_else(|| "1".into()),
        job_cell,
        step_message(s),
    ]];
    // Node instances and loop iterations: one line per Job of the step.
    if !single {
        for j in step_jobs {
            rows.push(job_row(k, j, &indent, now).await?);
        }
    }
    Ok(rows)
}

/// A step's MESSAGE cell: its instance counts ahead of its message, or "no change".
fn step_message(s: &StepStatus) -> String {
    let mut msg = s.message.clone().unwrap_or_default();
    if let Some(c) = &s.instances {
        msg = format!(
            "{}/{} succeeded, {} failed, {} running, {} skipped{}",
            c.succeeded,
            c.total,
            c.failed,
            c.running,
            c.skipped,
            if msg.is_empty() {
                String::new()
            } else {
                format!("; {msg}")
            }
        );
    }
    if s.changed == Some(false) && msg.is_empty() {
        msg = "no change".into();
    }
    msg
}

/// The row of one Job of a step with several: its instance, phase, duration, attempt and pod.
async fn job_row(
    k: &Kube,
    j: &Job,
    indent: &str,
    now: k8s_openapi::jiff::Timestamp,
) -> anyhow::Result<Row> {
    let inst = annotation(j, INSTANCE_ANNOTATION);
    let attempt = annotation(j, ATTEMPT_ANNOTATION);
    Ok([
        format!(
            "{indent}  └ {}",
            if inst.is_empty() { "-" } else { inst.as_str() }
        ),
        job_phase(j),
        duration(
            j.status.as_ref().and_then(|s| s.start_time.as_ref()),
            j.status.as_ref().and_then(|s| s.completion_time.as_ref()),
            now,
        ),
        if attempt.is_empty() {
            "1".into()
        } else {
            attempt
        },
        job_pod(k, j).await?,
        String::new(),
    ])
}

/// Members of fused segments that ran in another step's Job, by node id: what each segment
/// Job's journal (`<job>-journal`, crd::protocol::journal) records. Read for display only; the
/// controller is what checks the entries' signatures.
async fn fused_members(k: &Kube, jobs: &BTreeMap<String, Vec<Job>>) -> BTreeMap<String, Job> {
    let api = Api::<ConfigMap>::namespaced(k.client.clone(), &k.namespace);
    let mut out = BTreeMap::new();
    for j in jobs.values().filter(|js| js.len() == 1).flatten() {
        let name = j.metadata.name.clone().unwrap_or_default();
        let Ok(Some(cm)) = api.get_opt(&journal_name(&name)).await else {
            continue;
        };
        let doc = cm.data.and_then(|mut d| d.remove(JOURNAL_KEY));
        let entries: Vec<Entry> = doc
            .and_then(|d| serde_json::from_str(&d).ok())
            .unwrap_or_default();
        for e in entries.into_iter().filter(|e| !e.node.is_empty()) {
            out.insert(e.node, j.clone());
        }
    }
    out
}

fn job_phase(j: &Job) -> String {
    let s = j.status.clone().unwrap_or_default();
    if s.succeeded.unwrap_or(0) > 0 {
        "Succeeded".into()
    } else if s.active.unwrap_or(0) > 0 {
        "Running".into()
    } else if s.failed.unwrap_or(0) > 0 {
        "Failed".into()
    } else {
        "Pending".into()
    }
}

async fn job_pod(k: &Kube, j: &Job) -> anyhow::Result<String> {
    let name = j.metadata.name.clone().unwrap_or_default();
    let pods = job_pods(k, &name).await?;
    Ok(match pods.last().and_then(|p| p.metadata.name.clone()) {
        Some(p) => format!("{name}/{p}"),
        None => name,
    })
}

/// `kubectl pf get NAME [-w]`.
pub async fn get(k: &Kube, name: &str, watch: bool, output: Option<Output>) -> anyhow::Result<()> {
    let f = flow(k, name).await?;
    if let Some(o) = output {
        return print_objects(&serde_json::to_value(&f)?, o);
    }
    if !watch {
        out!("{}", render(k, &f).await?);
        return Ok(());
    }
    // Redraw on every change of the flow or of one of its Jobs.
    let flow_events = watcher(
        flows(&k.client, Some(&k.namespace)),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .map(|_| ());
    let job_events = watcher(
        Api::<Job>::namespaced(k.client.clone(), &k.namespace),
        watcher::Config::default().labels(&format!("{LABEL_FLOW}={}", label_value(name))),
    )
    .default_backoff()
    .map(|_| ());
    let mut events = std::pin::pin!(futures::stream::select(flow_events, job_events));
    let mut last = String::new();
    loop {
        let f = flow(k, name).await?;
        let text = render(k, &f).await?;
        if text != last {
            // Clear the screen and draw again, as `watch` does (`out!` flushes).
            out!("\x1b[H\x1b[2J{text}");
            last = text;
        }
        if events.next().await.is_none() {
            return Ok(());
        }
    }
}
