//! `get` of a flow bound to a kind (`spec.bind`): it runs no steps itself, so instead of a step
//! tree it shows its objects, one row each (the object, the flow serving it, its latest run's
//! phase, when, and why it failed), then the objects it could not serve. A flow recorded in its
//! objects (`bind.record: Object`) has no child flows: its rows come from the objects
//! ([`crate::in_object`]).

use std::fmt::Write as _;

use kube::api::{DynamicObject, ListParams};
use pseudoflow_crd::bind::{Bind, BindRecord, BOUND_TO_LABEL, OBJECT_ANNOTATION};
use pseudoflow_crd::protocol::label_value;
use pseudoflow_crd::rollout::REVISION_ANNOTATION;
use pseudoflow_crd::PseudoFlowStatus;

use crate::cluster::{flows, status, Kube};
use crate::revision::RevisionNumbers;
use crate::show::{header, human, phase, table};

/// One row of the objects table: OBJECT, FLOW, PHASE, LAST RUN, REVISION, MESSAGE.
type Row = [String; 6];

/// The bound flow `f` (its status `st`) and its objects, as `get` prints it.
pub async fn render(k: &Kube, f: &DynamicObject, st: &PseudoFlowStatus) -> anyhow::Result<String> {
    let name = f.metadata.name.clone().unwrap_or_default();
    let uid = f.metadata.uid.clone().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut out = header(&k.namespace, &name, st, now);
    let mut rows = vec![[
        "OBJECT".to_string(),
        "FLOW".into(),
        "PHASE".into(),
        "LAST RUN".into(),
        "REVISION".into(),
        "MESSAGE".into(),
    ]];
    let numbers = RevisionNumbers::of(st);
    let bind = f.data["spec"]["bind"].clone();
    let bind = serde_json::from_value::<Bind>(bind).ok();
    let mut unreadable = false;
    // Where its objects' runs are recorded: as asked, or as the controller chose (status).
    let chosen = st.bound.as_ref().and_then(|b| b.record);
    let record_in = |b: &Bind| b.record.or(chosen) == Some(BindRecord::Object);
    let served = match bind.filter(record_in) {
        Some(b) => match crate::in_object::rows(k, &name, &uid, &b, &numbers).await {
            Ok(objects) => {
                let served = objects.iter().filter(|o| o.served);
                let served = served.map(|o| o.cells[0].clone()).collect();
                rows.extend(objects.into_iter().map(|o| o.cells));
                served
            }
            Err(line) => {
                let _ = writeln!(out, "{line}");
                unreadable = true;
                Vec::new()
            }
        },
        None => child_rows(k, (&name, &uid), now, &numbers, &mut rows).await?,
    };
    if rows.len() > 1 {
        out.push_str(&table(&rows));
    } else if !unreadable {
        out.push_str("no object of the kind matches yet\n");
    }
    let refused = st.bound.iter().flat_map(|b| &b.failures);
    // Objects that could not be read: whether a failed one was served is not known.
    let said = if unreadable { "failed" } else { "not served" };
    for r in refused.filter(|r| !served.contains(&r.object)) {
        let _ = writeln!(out, "{said}: {}: {}", r.object, r.message);
    }
    Ok(out)
}

/// The rows of the bound flow `name` (uid `uid`)'s child flows, added to `rows`; returns the
/// objects they serve.
async fn child_rows(
    k: &Kube,
    (name, uid): (&str, &str),
    now: k8s_openapi::jiff::Timestamp,
    numbers: &RevisionNumbers,
    rows: &mut Vec<Row>,
) -> anyhow::Result<Vec<String>> {
    let lp = ListParams::default().labels(&format!("{BOUND_TO_LABEL}={}", label_value(name)));
    let mut children: Vec<DynamicObject> = flows(&k.client, Some(&k.namespace))
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|c| owned_by(c, uid))
        .collect();
    children.sort_by_cached_key(object_of);
    for c in &children {
        let cs = status(c);
        let failed = matches!(phase(&cs).as_str(), "Failed" | "Aborted");
        rows.push([
            object_of(c),
            c.metadata.name.clone().unwrap_or_default(),
            phase(&cs),
            cs.last_run_time
                .as_ref()
                .map(|t| format!("{} ago", human(now.as_second() - t.0.as_second())))
                .unwrap_or_else(|| "-".into()),
            numbers.shown(revision_of(c)),
            // A successful run's message says nothing the phase does not.
            if failed {
                cs.message.clone().unwrap_or_default()
            } else {
                String::new()
            },
        ]);
    }
    Ok(children.iter().map(object_of).collect())
}

/// `namespace/name` of the object child flow `c` serves.
fn object_of(c: &DynamicObject) -> String {
    let a = c.metadata.annotations.as_ref();
    a.and_then(|a| a.get(OBJECT_ANNOTATION))
        .cloned()
        .unwrap_or_default()
}

/// The hash of the revision child flow `c` was made from.
fn revision_of(c: &DynamicObject) -> Option<&str> {
    let a = c.metadata.annotations.as_ref()?;
    a.get(REVISION_ANNOTATION).map(String::as_str)
}

/// Whether `c` is a child of the bound flow `uid` (a label alone can be written by anyone who
/// may create flows).
fn owned_by(c: &DynamicObject, uid: &str) -> bool {
    c.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && o.controller == Some(true))
}
