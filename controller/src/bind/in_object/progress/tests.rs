use pseudoflow_walk::StoredRun;
use serde_json::json;

use super::*;

fn run() -> StoredRun {
    let mut run = StoredRun {
        run_id: "oabc".into(),
        started_at: 7,
        ..Default::default()
    };
    run.vars.insert("dump".into(), json!("s3cr3t-output"));
    run
}

fn seal(key: &Key, flow: &str, uid: &str, work: &str) -> Seal {
    Seal::new(Some(key), ("ops", flow), uid, work)
}

#[test]
fn a_record_opens_only_for_its_flow_object_and_run_and_hides_its_variables() {
    let key = Key::random();
    let begun = Some(("s1".to_string(), vec![], 1));
    let p = Progress::of("w1", &run(), begun);
    let text = seal(&key, "db", "uid-1", "w1").seal(&p).unwrap();
    assert!(text.starts_with(VERSION));
    assert!(!text.contains("s3cr3t"), "the variables are not readable");
    assert_eq!(seal(&key, "db", "uid-1", "w1").open(&text), Some(p.clone()));
    // Another object, flow, run or key: not believed.
    assert_eq!(seal(&key, "db", "uid-2", "w1").open(&text), None);
    assert_eq!(seal(&key, "other", "uid-1", "w1").open(&text), None);
    assert_eq!(
        seal(&key, "db", "uid-1", "w2").open(&text),
        None,
        "a replay"
    );
    assert_eq!(seal(&Key::random(), "db", "uid-1", "w1").open(&text), None);
}

#[test]
fn an_edited_or_written_record_is_not_believed() {
    let key = Key::random();
    let s = seal(&key, "db", "uid-1", "w1");
    let text = s.seal(&Progress::of("w1", &run(), None)).unwrap();
    // One character changed anywhere in the sealed part.
    let mut bytes = text.into_bytes();
    let i = bytes.len() - 5;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    assert_eq!(s.open(&String::from_utf8(bytes).unwrap()), None);
    // A tenant's own record, written in clear.
    let plain = serde_json::to_string(&Progress::of("w1", &run(), None)).unwrap();
    assert_eq!(s.open(&plain), None);
    assert_eq!(s.open(&format!("{VERSION}{plain}")), None);
    assert_eq!(s.open("p1."), None);
}

#[test]
fn without_a_key_no_record_is_sealed_or_believed() {
    let keyed = seal(&Key::random(), "db", "uid-1", "w1");
    let text = keyed.seal(&Progress::of("w1", &run(), None)).unwrap();
    let none = Seal::new(None, ("ops", "db"), "uid-1", "w1");
    assert_eq!(
        none.seal(&Progress::of("w1", &run(), None)),
        Err(NotKept::NoKey)
    );
    assert_eq!(none.open(&text), None);
}

#[test]
fn a_record_larger_than_its_bound_is_refused() {
    let key = Key::random();
    let mut big = run();
    big.vars
        .insert("big".into(), json!("x".repeat(MAX_PROGRESS_BYTES)));
    let s = seal(&key, "db", "uid-1", "w1");
    assert!(matches!(
        s.seal(&Progress::of("w1", &big, None)),
        Err(NotKept::TooLarge(n)) if n > MAX_PROGRESS_BYTES
    ));
}
