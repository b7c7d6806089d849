//! `pseudoflow-compile FILE... [--format tree|dot|mermaid|json] [--emit NODE_ID [--node NAME]]`
//!
//! Shows the DAG a flow compiles to, or the input Secret and Job one node would run as. Given
//! several files (or documents), it also reports `includeFlow` cycles among their flows.
//! Exit codes: 0 valid, 1 invalid flow (every diagnostic on stderr), 2 usage error.

use std::process::ExitCode;

use pseudoflow_compiler::emit::{emit_node, to_yaml};
use pseudoflow_compiler::flow_set::{
    describe_cycle, include_cycles, include_edges, FlowKey, IncludeEdge,
};
use pseudoflow_compiler::lower::{FlowRef, LowerOptions};
use pseudoflow_compiler::render::{render, Format};
use pseudoflow_compiler::{compile, source, FlowId};

const USAGE: &str = "usage: pseudoflow-compile FILE... [--format tree|dot|mermaid|json] [--emit NODE_ID [--node NODE_NAME] [--image IMAGE]]";

struct Args {
    files: Vec<String>,
    format: Format,
    emit: Option<String>,
    node: Option<String>,
    image: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut files = Vec::new();
    let (mut format, mut emit, mut node, mut image) = (Format::Tree, None, None, None);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().ok_or_else(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--format" | "-f" => format = value("--format")?.parse()?,
            "--emit" => emit = Some(value("--emit")?),
            "--node" => node = Some(value("--node")?),
            "--image" => image = Some(value("--image")?),
            "-h" | "--help" => return Err(String::new()),
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            path => files.push(path.to_string()),
        }
    }
    if files.is_empty() {
        return Err("missing FILE".into());
    }
    Ok(Args {
        files,
        format,
        emit,
        node,
        image,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("pseudoflow-compile: {msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut seen = Seen::default();
    for file in &args.files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("pseudoflow-compile: cannot read {file}: {e}");
                return ExitCode::from(2);
            }
        };
        let docs = match source::load(&text) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{file}: {e}");
                seen.failed = true;
                continue;
            }
        };
        for doc in docs {
            if let Err(code) = seen.compile(file, doc, &args) {
                return code;
            }
        }
    }
    seen.report_cycles();
    if seen.failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// What the files given compiled to so far.
#[derive(Default)]
struct Seen<'f> {
    /// Whether any flow was invalid.
    failed: bool,
    /// Every flow that compiled, by key, with the file it came from, for includeFlow cycles.
    flows: Vec<(FlowKey, &'f str, source::FlowDocument)>,
    edges: Vec<IncludeEdge>,
}

impl<'f> Seen<'f> {
    /// Compiles one flow of `file`: prints its diagnostics (each with its line), else its
    /// warnings and what `args` asks for (the DAG, or one node's objects). Err: stop now, with
    /// this exit code.
    fn compile(
        &mut self,
        file: &'f str,
        doc: source::FlowDocument,
        args: &Args,
    ) -> Result<(), ExitCode> {
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        let compiled = match compile(&id, doc.spec()) {
            Ok(c) => c,
            Err(mut diags) => {
                doc.locate(&mut diags);
                diags.0.sort_by_key(|d| d.line);
                for d in &diags.0 {
                    eprintln!("{file}: {d}");
                }
                self.failed = true;
                return Ok(());
            }
        };
        let mut warnings = compiled.warnings.clone();
        doc.locate(&mut warnings);
        for d in &warnings.0 {
            eprintln!("{file}: {d}");
        }
        let out = match &args.emit {
            None => render(
                &title(&doc.name, &compiled.spec, args.format),
                &compiled.plan,
                compiled.on_delete.as_ref(),
                args.format,
            ),
            Some(node_id) => emit(&doc, &compiled, node_id, args).map_err(|e| {
                eprintln!("pseudoflow-compile: {e}");
                ExitCode::from(1)
            })?,
        };
        print!("{out}");
        self.edges.extend(include_edges(&id, &compiled.spec));
        let key = FlowKey::of(&id);
        self.flows.push((key, file, doc));
        Ok(())
    }

    /// includeFlow cycles among the flows given: said at every step of the cycle, in its file.
    fn report_cycles(&mut self) {
        for cycle in include_cycles(&self.edges) {
            self.failed = true;
            for (i, edge) in cycle.iter().enumerate() {
                let Some((_, file, doc)) = self.flows.iter().find(|(k, _, _)| *k == edge.from)
                else {
                    continue;
                };
                let mut diags = pseudoflow_crd::Diagnostics::default();
                diags.error(edge.path.clone(), describe_cycle(&cycle, i));
                doc.locate(&mut diags);
                for d in &diags.0 {
                    eprintln!("{file}: {d}");
                }
            }
        }
    }
}

/// The input Secret and Job of one node, for run 1 of the flow, with `spec.vars` substituted.
fn emit(
    doc: &source::FlowDocument,
    compiled: &pseudoflow_compiler::Compiled,
    node_id: &str,
    args: &Args,
) -> Result<String, String> {
    let flow = FlowRef {
        name: doc.name.clone(),
        namespace: doc.namespace.clone().unwrap_or_else(|| "default".into()),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        service_account: compiled
            .spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into()),
    };
    let mut opts = LowerOptions::default();
    if let Some(image) = &args.image {
        opts.image = image.clone();
    }
    let node_name = args.node.as_deref().unwrap_or("NODE");
    let lowered =
        emit_node(compiled, &flow, node_id, node_name, &opts).map_err(|e| e.to_string())?;
    Ok(to_yaml(&lowered))
}

/// The tree's title: the flow's name, with its schedule, its binding and whether it is
/// suspended.
fn title(name: &str, spec: &pseudoflow_crd::PseudoFlowSpec, format: Format) -> String {
    let mut notes = Vec::new();
    if let Some(cron) = &spec.schedule {
        let tz = spec.time_zone.as_deref().unwrap_or("UTC");
        let policy = spec.options.concurrency_policy;
        notes.push(format!(
            "schedule {cron:?} in {tz}, concurrencyPolicy {policy:?}"
        ));
    }
    if let Some(bind) = &spec.bind {
        notes.push(format!(
            "bound to {} {}: one run per object",
            bind.api_version, bind.kind
        ));
        let record = pseudoflow_compiler::record::RecordIn::of(spec);
        notes.extend(record.describe().map(String::from));
    }
    if spec.suspend {
        notes.push("suspended: no new run starts".to_string());
    }
    if notes.is_empty() || format != Format::Tree {
        return name.to_string();
    }
    format!("{name} ({})", notes.join("; "))
}
