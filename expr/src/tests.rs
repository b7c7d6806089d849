//! One test per substitution rule, plus property tests that substituted values are never
//! evaluated again.

use super::*;
use proptest::prelude::*;
use serde_json::{json, Value};

fn scope(pairs: &[(&str, Value)]) -> Scope {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn sub(s: &str, sc: &Scope) -> Value {
    Engine::new()
        .substitute_str(s, sc, "spec.steps[0].x")
        .unwrap()
        .0
}

#[test]
fn a_name_is_replaced_inside_text() {
    let sc = scope(&[("dns_ip", json!("100.64.0.10"))]);
    assert_eq!(
        sub("nameserver ${dns_ip}\n", &sc),
        json!("nameserver 100.64.0.10\n")
    );
}

#[test]
fn a_whole_field_expression_keeps_its_type() {
    let sc = scope(&[
        ("unlabeled", json!("n1 n2")),
        ("n", json!(3)),
        ("m", json!({"a": 1})),
    ]);
    assert_eq!(sub("${unlabeled.split(' ')}", &sc), json!(["n1", "n2"]));
    assert_eq!(sub("${n}", &sc), json!(3));
    assert_eq!(sub("${ m }", &sc), json!({"a": 1}));
}

#[test]
fn an_empty_string_splits_into_no_items() {
    // The seed's §10 flow re-run when every node is labelled: kubectl printed nothing.
    let sc = scope(&[("unlabeled", json!("")), ("csv", json!("a,,b"))]);
    assert_eq!(sub("${unlabeled.split(' ')}", &sc), json!([]));
    assert_eq!(sub("${unlabeled.split()}", &sc), json!([]));
    assert_eq!(sub("${unlabeled | split(' ') | list}", &sc), json!([]));
    // Only the empty string: a non-empty one keeps Python's empty fields.
    assert_eq!(sub("${csv.split(',')}", &sc), json!(["a", "", "b"]));
    assert_eq!(
        sub("${csv | split(',') | list}", &sc),
        json!(["a", "", "b"])
    );
    assert_eq!(sub("${' '.split(' ')}", &sc), json!(["", ""]));
}

#[test]
fn non_strings_render_as_json_inside_text() {
    let sc = scope(&[("n", json!(3)), ("l", json!([1, 2]))]);
    assert_eq!(sub("n=${n} l=${l}", &sc), json!("n=3 l=[1,2]"));
}

#[test]
fn double_dollar_escapes_a_literal() {
    let sc = scope(&[("x", json!("v"))]);
    assert_eq!(sub("$${x} is ${x}", &sc), json!("${x} is v"));
}

#[test]
fn unknown_plain_name_is_left_as_is_with_a_warning() {
    let (v, w) = Engine::new()
        .substitute_str("echo ${HOME}/bin", &Scope::new(), "spec.steps[2].code")
        .unwrap();
    assert_eq!(v, json!("echo ${HOME}/bin"));
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].path, "spec.steps[2].code");
    assert!(w[0].message.contains("${HOME}"), "{}", w[0].message);
}

#[test]
fn other_failing_expressions_are_errors_naming_the_path() {
    let sc = scope(&[("x", json!({"a": 1}))]);
    let e = Engine::new()
        .substitute_str("${x.b}", &sc, "spec.steps[3].then[0].message")
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("spec.steps[3].then[0].message: cannot evaluate ${x.b}"),
        "{e}"
    );
    let e = Engine::new()
        .substitute_str("${nope.split(' ')}", &sc, "p")
        .unwrap_err();
    assert!(
        e.to_string().contains("nope") || e.reason.contains("undefined"),
        "{e}"
    );
}

#[test]
fn python_like_methods_work() {
    let sc = scope(&[("s", json!("A,b"))]);
    assert_eq!(sub("${s.lower().split(',')}", &sc), json!(["a", "b"]));
    assert_eq!(sub("${s.startswith('A')}", &sc), json!(true));
}

#[test]
fn json_function_parses_text() {
    let sc = scope(&[("mapping", json!(r#"{"node1":{"env":"stage"}}"#))]);
    assert_eq!(
        sub("${json(mapping)}", &sc),
        json!({"node1": {"env": "stage"}})
    );
}

#[test]
fn eval_expression_treats_references_as_variables() {
    let sc = scope(&[(
        "mapping",
        json!("{\"node1\":{\"env\":\"stage\"},\"node2\":{\"env\":\"prod\"}}\n"),
    )]);
    let v = Engine::new()
        .eval_expression("json(${mapping})", &sc, "spec.steps[0].expression")
        .unwrap();
    assert_eq!(
        v,
        json!({"node1": {"env": "stage"}, "node2": {"env": "prod"}})
    );
}

#[test]
fn eval_never_splices_a_value_into_code() {
    // If the value were pasted into the expression, this would evaluate 7*6.
    let sc = scope(&[("v", json!("7*6"))]);
    assert_eq!(
        Engine::new().eval_expression("${v}", &sc, "p").unwrap(),
        json!("7*6")
    );
}

#[test]
fn work_is_bounded_by_fuel_and_result_size() {
    let e = Engine::new();
    assert!(e
        .substitute_str("${range(100000000)|list}", &Scope::new(), "p")
        .is_err());
    let err = e
        .substitute_str("${'x' * 100000000}", &Scope::new(), "p")
        .unwrap_err();
    assert!(err.reason.contains("would exceed"), "{err}");
    let long = format!("${{{}}}", "1+".repeat(MAX_EXPRESSION_BYTES));
    assert!(e
        .substitute_str(&long, &Scope::new(), "p")
        .unwrap_err()
        .reason
        .contains("longer than"));
    let explode = "${(range(99999)|join('')).replace('1', range(99999)|join(''))}";
    let err = e.substitute_str(explode, &Scope::new(), "p").unwrap_err();
    assert!(err.reason.contains("exceed"), "{err}");
    assert!(e
        .substitute_str("${'ab'.center(100000000)}", &Scope::new(), "p")
        .is_err());
}

#[test]
fn no_file_or_template_access() {
    let e = Engine::new();
    assert!(e
        .render_template("{% include '/etc/passwd' %}", &Scope::new(), "p")
        .is_err());
    assert!(e
        .render_template("{% import 'x' as y %}", &Scope::new(), "p")
        .is_err());
    assert!(e.substitute_str("${debug()}", &Scope::new(), "p").is_err());
}

#[test]
fn templates_render_with_the_scope() {
    let sc = scope(&[("nodes", json!(["a", "b"]))]);
    let out = Engine::new()
        .render_template("{% for n in nodes %}{{ n }};{% endfor %}", &sc, "p")
        .unwrap();
    assert_eq!(out, "a;b;");
}

#[test]
fn templates_keep_their_trailing_newline() {
    // A file written from a template ends like the template does (resolv.conf, flags files).
    let sc = scope(&[("ip", json!("10.0.0.1"))]);
    let e = Engine::new();
    assert_eq!(
        e.render_template("nameserver {{ ip }}\n", &sc, "p")
            .unwrap(),
        "nameserver 10.0.0.1\n"
    );
    assert_eq!(e.render_template("a\n\n", &sc, "p").unwrap(), "a\n\n");
    assert_eq!(e.render_template("a", &sc, "p").unwrap(), "a");
}

#[test]
fn check_finds_names_and_syntax_errors() {
    let e = Engine::new();
    let refs = e.check("a ${x} b ${y.split(z)}", "p").unwrap();
    assert_eq!(refs[0].names, ["x"]);
    assert!(refs[0].plain);
    assert_eq!(refs[1].names, ["y", "z"]);
    assert!(!refs[1].plain);
    assert!(e.check("${broken(}", "p").is_err());
}

proptest! {
    #[test]
    fn substituted_values_are_never_evaluated_again(v in ".*") {
        let sc = scope(&[("v", json!(v.clone()))]);
        let e = Engine::new();
        prop_assert_eq!(e.substitute_str("${v}", &sc, "p").unwrap().0, json!(v.clone()));
        prop_assert_eq!(e.substitute_str("pre ${v} post", &sc, "p").unwrap().0, json!(format!("pre {v} post")));
    }

    #[test]
    fn template_like_values_stay_literal(inner in "[a-z ]{0,8}") {
        for v in [format!("${{{inner}}}"), format!("{{{{{inner}}}}}"), format!("{{% {inner} %}}")] {
            let sc = scope(&[("v", json!(v.clone()))]);
            prop_assert_eq!(Engine::new().substitute_str("x${v}", &sc, "p").unwrap().0, json!(format!("x{v}")));
        }
    }

    #[test]
    fn scan_never_panics(s in ".*") {
        let _ = scan(&s);
    }
}

#[test]
fn values_nested_deeper_than_the_bound_are_refused_naming_the_field() {
    let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
    let e = Engine::new();
    let sc = scope(&[("deep", json!(nested(127))), ("ok", json!(nested(32)))]);
    let err = e
        .eval_expression("json(${deep})", &sc, "spec.steps[1].expression")
        .unwrap_err();
    assert!(
        err.to_string().starts_with("spec.steps[1].expression: ")
            && err.reason.contains("deeper than 32 levels"),
        "{err}"
    );
    assert!(e.substitute_str("${json(deep)}", &sc, "p").is_err());
    assert!(e.eval_expression("json(${ok})", &sc, "p").is_ok());
}

#[test]
fn a_quoting_command_inserts_each_value_as_one_shell_word_unless_raw() {
    let e = Engine::new();
    let sc = scope(&[
        ("u", json!("x; id -u")),
        ("n", json!(3)),
        ("flags", json!("-a -b")),
    ]);
    let (v, _) = e
        .substitute_shell(
            "echo hi ${u} ${n} ${ u | shq } ls ${flags | raw} $HOME ${HOME}",
            &sc,
            "spec.steps[0].cmd",
        )
        .unwrap();
    assert_eq!(
        v,
        json!("echo hi 'x; id -u' '3' 'x; id -u' ls -a -b $HOME ${HOME}")
    );
    // A whole-field expression is a string too, and quoted.
    let (v, _) = e.substitute_shell("${u}", &sc, "p").unwrap();
    assert_eq!(v, json!("'x; id -u'"));
    // Outside commands, `raw` is the value unchanged.
    assert_eq!(
        e.substitute_str("${u | raw}", &sc, "p").unwrap().0,
        json!("x; id -u")
    );
}

/// docs/decisions.md#tenant-data-never-chooses-where-a-step-acts: `oneline` passes a value with
/// no line break as it is and fails the substitution on one that has one (a tenant's newline
/// would add a line to a node file).
#[test]
fn oneline_refuses_a_value_with_a_line_break() {
    let e = Engine::new();
    let sc = scope(&[
        ("ok", json!("alice")),
        ("n", json!(3)),
        ("nl", json!("alice\nroot ALL=(ALL) NOPASSWD: ALL")),
        ("cr", json!("a\rb")),
    ]);
    let (v, _) = e
        .substitute_str("user=${ ok | oneline } n=${ n | oneline }", &sc, "p")
        .unwrap();
    assert_eq!(v, json!("user=alice n=3"));
    for var in ["nl", "cr"] {
        let err = e
            .substitute_str(
                &format!("user=${{ {var} | oneline }}"),
                &sc,
                "spec.steps[0].content",
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("line break"), "{err}");
        assert!(!err.contains("NOPASSWD"), "the value is not quoted: {err}");
    }
    assert!(crate::is_oneline(" ok | oneline "));
    assert!(!crate::is_oneline("ok"));
}
