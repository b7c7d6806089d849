//! `crd/pseudoflow.yaml` is generated from the Rust types; this fails when someone changed the
//! types without running `make crd`.

#[test]
fn checked_in_crd_matches_the_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/pseudoflow.yaml");
    let on_disk = std::fs::read_to_string(path).expect("crd/pseudoflow.yaml exists");
    let generated = pseudoflow_crd::schema::crd_yaml();
    assert!(
        on_disk == generated,
        "crd/pseudoflow.yaml is stale: run `make crd` and review the diff"
    );
}

#[test]
fn crd_schema_is_structural() {
    let v: serde_json::Value = serde_yaml::from_str(&pseudoflow_crd::schema::crd_yaml()).unwrap();
    let text = v.to_string();
    for forbidden in [
        "\"anyOf\"",
        "\"oneOf\"",
        "\"$ref\"",
        "\"const\"",
        "x-pseudoflow",
    ] {
        assert!(!text.contains(forbidden), "CRD schema contains {forbidden}");
    }
    let steps = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["steps"]["items"];
    assert_eq!(
        steps["properties"]["type"]["enum"]
            .as_array()
            .unwrap()
            .len(),
        31
    );
    // One CEL rule per step type with a required field of a declared type (CEL cannot test
    // open fields such as `condition`, which differs between if/when and waitFor, or
    // `loopNodes.selector`, a string or a structured selector).
    let rules = steps["x-kubernetes-validations"].as_array().unwrap();
    assert_eq!(rules.len(), 24);
    // `copy` needs its source and targets.
    assert!(
        rules
            .iter()
            .any(|r| r["rule"] == "self.type != 'copy' || (has(self.from) && has(self.to))"),
        "{rules:?}"
    );
    // `target` keeps its rules although its `selector` is open.
    assert!(
        rules
            .iter()
            .any(|r| r["rule"]
                == "self.type != 'setLabel' || (has(self.target) && has(self.labels))"),
        "{rules:?}"
    );
    assert!(
        steps["properties"]["target"]["type"] == "object",
        "target merges into one typed object"
    );
    assert!(
        steps["properties"]["condition"].get("type").is_none(),
        "condition really differs by type"
    );
    assert!(
        rules
            .iter()
            .any(|r| r["rule"] == "self.type != 'sleep' || (has(self.seconds))"),
        "{rules:?}"
    );
}

#[test]
fn checked_in_step_reference_matches_the_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/steps.md");
    let on_disk = std::fs::read_to_string(path).expect("docs/steps.md exists");
    assert!(
        on_disk == pseudoflow_crd::docs::steps_markdown(),
        "docs/steps.md is stale: run `make docs`"
    );
}

#[test]
fn chart_crd_template_matches_the_types() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../charts/pseudoflow-operator/templates/crd-pseudoflow.yaml"
    );
    let on_disk = std::fs::read_to_string(path).expect("chart CRD template exists");
    assert!(
        on_disk == pseudoflow_crd::schema::crd_chart_template(),
        "the chart's CRD template is stale: run `make crd`"
    );
}
