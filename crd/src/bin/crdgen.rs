//! Prints the PseudoFlow CRD; `make crd` writes it to `crd/pseudoflow.yaml`.

fn main() {
    print!("{}", pseudoflow_crd::schema::crd_yaml());
}
