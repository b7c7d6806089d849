//! Prints the PseudoFlow CRD (`make crd` writes `crd/pseudoflow.yaml`), or with `docs` the step
//! reference (`make docs` writes `docs/steps.md`), or with `chart` the Helm chart's CRD template.

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("docs") => print!("{}", pseudoflow_crd::docs::steps_markdown()),
        Some("chart") => print!("{}", pseudoflow_crd::schema::crd_chart_template()),
        _ => print!("{}", pseudoflow_crd::schema::crd_yaml()),
    }
}
