use super::condition::Evaluated;
use super::*;
use pseudoflow_compiler::Compiled;
use pseudoflow_walk::Action;
use serde_json::json;

fn compiled(spec: Value) -> Compiled {
    let id = pseudoflow_compiler::FlowId {
        name: "f",
        namespace: Some("ns"),
    };
    pseudoflow_compiler::compile(&id, &spec).unwrap()
}

fn flow_ref() -> FlowRef {
    FlowRef {
        name: "f".into(),
        namespace: "ns".into(),
        uid: "uid-1".into(),
        service_account: "flow".into(),
    }
}

fn starts(walker: &Walker<'_>, run: &mut StoredRun) -> Vec<(String, Vec<String>, u32)> {
    let out = walker.advance(&mut run.state, 0);
    out.actions
        .into_iter()
        .filter_map(|a| match a {
            Action::Start { node, key, attempt } => Some((node, key, attempt)),
            Action::Abort { .. } => None,
        })
        .collect()
}

/// The driver of a plain run of `c` (no bound object).
fn plain_driver<'a>(
    (engine, flow): (&'a Engine, &'a FlowRef),
    c: &'a Compiled,
    walker: &'a Walker<'a>,
) -> Driver<'a> {
    Driver {
        engine,
        flow,
        spec: &c.spec,
        walker,
        bound: None,
    }
}

#[test]
fn a_loop_items_instance_sees_its_item_index_the_flow_vars_and_the_bound_object() {
    let c = compiled(json!({"vars": {"greeting": "hi"}, "steps": [
        {"type": "loop", "forEach": ["red", "blue"], "steps": [
            {"type": "log", "message": "${greeting} ${item}"}]}]}));
    let (engine, flow) = (Engine::default(), flow_ref());
    let walker = Walker::new(&c.plan);
    let (object, trigger) = (
        json!({"metadata": {"name": "db"}}),
        json!({"event": "create"}),
    );
    let driver = Driver {
        engine: &engine,
        flow: &flow,
        spec: &c.spec,
        walker: &walker,
        bound: Some((&object, &trigger)),
    };
    let mut run = StoredRun::default();
    // The loop's items: controller-local work, done by the driver.
    let first = starts(&walker, &mut run);
    let [(loop_id, key, _)] = first.as_slice() else {
        panic!("one loop start: {first:?}")
    };
    let node = c.plan.node(loop_id).unwrap();
    let sc = driver.scope(&run, node, key);
    let items = driver.run_local(&mut run, node, &sc).completion;
    assert!(items.ok, "{}", items.message);
    walker.complete(&mut run.state, loop_id, key, items, 0);
    // One item at a time: the first item's instance, then the second's.
    let [(log_id, key, _)] = starts(&walker, &mut run).try_into().unwrap();
    let log = c.plan.node(&log_id).unwrap();
    let sc = driver.scope(&run, log, &key);
    assert_eq!((&sc["item"], &sc["index"]), (&json!("red"), &json!(0)));
    let said = driver.run_local(&mut run, log, &sc).completion;
    walker.complete(&mut run.state, &log_id, &key, said, 0);
    let [(second, key, _)] = starts(&walker, &mut run).try_into().unwrap();
    assert_eq!(second, log_id, "the same step, for the next item");
    let sc = driver.scope(&run, log, &key);
    assert_eq!(sc["item"], json!("blue"));
    assert_eq!(sc["index"], json!(1));
    assert_eq!(sc["greeting"], json!("hi"));
    assert_eq!(sc["object"], object);
    assert_eq!(sc["trigger"], trigger);
    let said = driver.run_local(&mut run, log, &sc);
    assert_eq!(said.event.as_deref(), Some("hi blue"));
}

#[test]
fn a_plain_run_sees_no_object_and_sees_what_an_earlier_local_step_set() {
    let c = compiled(json!({"steps": [
        {"type": "eval", "expression": "1 + 1", "var": "two"},
        {"type": "log", "message": "${two}"}]}));
    let (engine, flow) = (Engine::default(), flow_ref());
    let walker = Walker::new(&c.plan);
    let driver = plain_driver((&engine, &flow), &c, &walker);
    let mut run = StoredRun::default();
    let [(eval_id, key, _)] = starts(&walker, &mut run).try_into().unwrap();
    let node = c.plan.node(&eval_id).unwrap();
    let sc = driver.scope(&run, node, &key);
    assert!(!sc.contains_key("object") && !sc.contains_key("trigger"));
    let done = driver.run_local(&mut run, node, &sc).completion;
    assert!(done.ok, "{}", done.message);
    assert_eq!(
        run.vars["two"],
        json!(2),
        "the driver sets the run's variable"
    );
    walker.complete(&mut run.state, &eval_id, &key, done, 0);
    let [(log_id, key, _)] = starts(&walker, &mut run).try_into().unwrap();
    let sc = driver.scope(&run, c.plan.node(&log_id).unwrap(), &key);
    assert_eq!(sc["two"], json!(2));
}

/// A client whose API server never answers.
fn silent_client() -> kube::Client {
    let never = tower::service_fn(|_: http::Request<kube::client::Body>| {
        futures::future::pending::<Result<http::Response<kube::client::Body>, std::io::Error>>()
    });
    kube::Client::new(never, "ns")
}

/// The condition node of `c` (the only one).
fn condition_of(c: &Compiled) -> &PlanNode {
    let is = |n: &&PlanNode| matches!(n.kind, pseudoflow_compiler::NodeKind::Condition);
    c.plan.nodes().find(is).expect("a condition")
}

/// What the condition of `c` (its only one) comes to in a plain run, its read sent to an API
/// server that never answers, with `within` to answer.
async fn condition_over_silence(c: &Compiled, within: std::time::Duration) -> Evaluated {
    let (engine, flow) = (Engine::default(), flow_ref());
    let walker = Walker::new(&c.plan);
    let driver = plain_driver((&engine, &flow), c, &walker);
    let run = StoredRun::default();
    let node = condition_of(c);
    let sc = driver.scope(&run, node, &[]);
    let until = tokio::time::Instant::now() + within;
    driver
        .condition(&run, (node, &[]), 1, &sc, (&silent_client(), until))
        .await
}

fn if_over(name: &str) -> Value {
    json!({"vars": {"missing": "a string"}, "steps": [{"type": "if",
        "condition": {"resource": {"kind": "ConfigMap", "name": name, "namespace": "ns"},
                      "jsonPath": "{.data.mode}", "op": "equals", "value": "on"},
        "then": [{"type": "log", "message": "on"}]}]})
}

#[tokio::test]
async fn a_condition_that_cannot_be_rendered_is_unrenderable_and_reads_nothing() {
    // `missing` is a string: it has no `name`.
    let c = compiled(if_over("${missing.name}"));
    let out = condition_over_silence(&c, std::time::Duration::from_secs(30)).await;
    assert!(
        matches!(&out, Evaluated::Unrenderable(why) if why.contains("missing")),
        "{out:?}"
    );
}

#[tokio::test]
async fn a_condition_whose_read_does_not_answer_by_the_deadline_is_timed_out() {
    let c = compiled(if_over("switch"));
    let out = condition_over_silence(&c, std::time::Duration::from_millis(300)).await;
    assert!(matches!(out, Evaluated::TimedOut), "{out:?}");
}

#[test]
fn an_in_controller_request_is_keyed_by_the_would_be_job_and_asks_the_client_only_once_rendered() {
    let c = compiled(
        json!({"vars": {"names": "a string"}, "steps": [{"type": "apply", "manifests":
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "${names.first}"}}}]}),
    );
    let (engine, flow) = (Engine::default(), flow_ref());
    let walker = Walker::new(&c.plan);
    let driver = plain_driver((&engine, &flow), &c, &walker);
    let run = StoredRun {
        run_id: "r1".into(),
        ..Default::default()
    };
    let node = c.plan.nodes().find(|n| n.step.is_some()).unwrap();
    let sc = driver.scope(&run, node, &[]);
    let asked = std::cell::Cell::new(false);
    let client = || {
        asked.set(true);
        Err("no client".to_string())
    };
    let why = driver.request(&run, (node, &[]), 1, &sc, client).err();
    assert!(why.is_some_and(|w| w.contains("names")) && !asked.get());
    let mut sc = sc;
    sc.insert("names".into(), json!({"first": "cm"}));
    let why = driver.request(&run, (node, &[]), 1, &sc, || Err("no client".into()));
    assert_eq!(why.err().as_deref(), Some("no client"));
    let job = job_name("f", "r1", &node.id, &[], 1);
    assert_eq!(
        driver.step_key(&run, &node.id, &[], 0),
        format!("uid-1/{job}")
    );
}
