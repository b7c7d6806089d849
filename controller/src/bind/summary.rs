//! The bound flow's own status: counts of its objects by phase and the latest failures (at most
//! [`MAX_FAILURES_SHOWN`]), so it stays the same size at 10 or 10,000 objects.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use pseudoflow_crd::bind::MAX_FAILURES_SHOWN;
use pseudoflow_crd::status::{BoundFailure, BoundSummary};

/// An object the bound flow could not serve (its flow could not be made), with why.
pub struct Refused {
    /// `namespace/name` of the object.
    pub object: String,
    /// Why.
    pub message: String,
}

/// The summary over the child flows `children` (each with its object in the annotation
/// `object`) and the objects refused this reconcile.
pub fn summarise(children: &[(String, &DynamicObject)], refused: &[Refused]) -> BoundSummary {
    let mut s = BoundSummary {
        objects: (children.len() + refused.len()) as u32,
        ..Default::default()
    };
    // Newest first: by the time the failed run started (RFC 3339 sorts as text).
    let mut failures: Vec<(String, BoundFailure)> = Vec::new();
    for (object, child) in children {
        let status = child.data.get("status");
        let phase = status
            .and_then(|st| st["phase"].as_str())
            .unwrap_or("Pending");
        match phase {
            "Succeeded" => s.running += 1,
            "Failed" | "Aborted" => {
                s.failed += 1;
                let st = status.expect("a phase comes from a status");
                let when = st["lastRunTime"].as_str().unwrap_or_default().to_string();
                failures.push((
                    when,
                    BoundFailure {
                        object: object.clone(),
                        message: st["message"].as_str().unwrap_or(phase).to_string(),
                    },
                ));
            }
            _ => s.creating += 1,
        }
    }
    s.failed += refused.len() as u32;
    failures.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.object.cmp(&b.1.object)));
    let refusals = refused.iter().map(|r| BoundFailure {
        object: r.object.clone(),
        message: r.message.clone(),
    });
    s.failures = refusals
        .chain(failures.into_iter().map(|(_, f)| f))
        .take(MAX_FAILURES_SHOWN)
        .map(|mut f| {
            f.message = crate::limits::bounded(&f.message, 512);
            f
        })
        .collect();
    s
}

/// The child flows counted per the hash of the revision each was made from (kept by
/// [`super::pages::child_state`] as `revision`; a child made before revisions is in none).
pub fn by_revision(children: &[(String, &DynamicObject)]) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for (_, c) in children {
        if let Some(h) = c.data["revision"].as_str() {
            *out.entry(h.to_string()).or_insert(0) += 1;
        }
    }
    out
}

/// One line for the bound flow's `status.message`.
pub fn message(kind: &str, s: &BoundSummary) -> String {
    format!(
        "{} {kind} object(s): {} Running, {} Creating, {} Failed",
        s.objects, s.running, s.creating, s.failed
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(phase: &str, at: &str) -> DynamicObject {
        serde_json::from_value(json!({"metadata": {"name": "c"},
            "status": {"phase": phase, "lastRunTime": at, "message": format!("{phase} at {at}")}}))
        .unwrap()
    }

    #[test]
    fn counts_by_phase_and_keeps_the_latest_five_failures() {
        let kids: Vec<DynamicObject> = (0..8)
            .map(|i| child("Failed", &format!("2026-01-0{}T00:00:00Z", i + 1)))
            .chain([child("Succeeded", "x"), child("Running", "x")])
            .collect();
        let named: Vec<(String, &DynamicObject)> = kids
            .iter()
            .enumerate()
            .map(|(i, c)| (format!("ops/db{i}"), c))
            .collect();
        let s = summarise(&named, &[]);
        assert_eq!((s.objects, s.running, s.creating, s.failed), (10, 1, 1, 8));
        assert_eq!(s.failures.len(), 5);
        assert_eq!(s.failures[0].object, "ops/db7");
        assert_eq!(
            message("Database", &s),
            "10 Database object(s): 1 Running, 1 Creating, 8 Failed"
        );
    }

    #[test]
    fn refused_objects_count_as_failed_and_come_first() {
        let kids = [child("Succeeded", "x")];
        let named = vec![("ops/a".to_string(), &kids[0])];
        let refused = [Refused {
            object: "ops/b".into(),
            message: "taken".into(),
        }];
        let s = summarise(&named, &refused);
        assert_eq!((s.objects, s.failed), (2, 1));
        assert_eq!(s.failures[0].message, "taken");
    }
}
