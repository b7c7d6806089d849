//! Reading flows from YAML files, remembering the line of every field so diagnostics can say
//! `line 12: spec.steps[3].seconds: ...` — `serde_yaml` values carry no positions, so a second,
//! event-level pass (yaml-rust2) maps each path to its line.

use std::collections::BTreeMap;

use serde_json::Value;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

use pseudoflow_crd::Diagnostics;

/// One PseudoFlow document from a file.
#[derive(Debug, Clone)]
pub struct FlowDocument {
    /// `metadata.name`: diagnostics and self-include checks name it.
    pub name: String,
    /// `metadata.namespace`, if the file gives one.
    pub namespace: Option<String>,
    /// The whole object as JSON.
    pub object: Value,
    lines: BTreeMap<String, usize>,
}

/// Why a file could not be read as flows.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file is not YAML at all.
    #[error("not valid YAML: {0}")]
    Yaml(String),
    /// A document of another kind (document number, its kind).
    #[error("document {0} is not a PseudoFlow (kind {1:?}); expected apiVersion ops.example.com/v1alpha1, kind PseudoFlow")]
    NotAFlow(usize, String),
    /// A flow without a name (document number).
    #[error("document {0} has no metadata.name")]
    NoName(usize),
    /// Nothing to compile.
    #[error("no PseudoFlow document found")]
    Empty,
}

impl FlowDocument {
    /// The raw `spec` (null when absent, which validation reports).
    pub fn spec(&self) -> &Value {
        self.object.get("spec").unwrap_or(&Value::Null)
    }

    /// Line (1-based) of the deepest known prefix of `path`.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut p = path.to_string();
        loop {
            if let Some(l) = self.lines.get(&p) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '['])?;
            p.truncate(cut);
        }
    }

    /// Fills in the line of each diagnostic.
    pub fn locate(&self, diags: &mut Diagnostics) {
        for d in &mut diags.0 {
            d.line = self.line_of(&d.path);
        }
    }
}

/// Reads every PseudoFlow in a (multi-document) YAML text.
pub fn load(text: &str) -> Result<Vec<FlowDocument>, SourceError> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = <Value as serde::Deserialize>::deserialize(de)
            .map_err(|e| SourceError::Yaml(e.to_string()))?;
        if !v.is_null() {
            docs.push(v);
        }
        let _ = i;
    }
    let line_maps = line_maps(text)?;
    let mut out = Vec::new();
    for (i, (mut object, lines)) in docs
        .into_iter()
        .zip(
            line_maps
                .into_iter()
                .chain(std::iter::repeat_with(BTreeMap::new)),
        )
        .enumerate()
    {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if kind != "PseudoFlow" {
            return Err(SourceError::NotAFlow(i + 1, kind));
        }
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or(SourceError::NoName(i + 1))?
            .to_string();
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        // What the API server would store: the apiVersion's default of spec.shellQuoting.
        pseudoflow_crd::quoting::default_by_version(&mut object);
        out.push(FlowDocument {
            name,
            namespace,
            object,
            lines,
        });
    }
    if out.is_empty() {
        return Err(SourceError::Empty);
    }
    Ok(out)
}

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, next: usize },
}

#[derive(Default)]
struct LineRecorder {
    docs: Vec<BTreeMap<String, usize>>,
    stack: Vec<Frame>,
}

impl LineRecorder {
    /// Path of a node starting now, recording its line; None when it is a mapping key.
    fn child_path(&mut self, line: usize, scalar_key: Option<&str>) -> Option<String> {
        let lines = self.docs.last_mut()?;
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Seq { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                lines.entry(p.clone()).or_insert(line);
                Some(p)
            }
            Some(Frame::Map { path, key }) => match key.take() {
                Some(k) => Some(pseudoflow_crd::text::join(path, &k)),
                None => {
                    if let Some(k) = scalar_key {
                        let p = pseudoflow_crd::text::join(path, k);
                        lines.insert(p, line);
                        *key = Some(k.to_string());
                    }
                    None
                }
            },
        }
    }
}

impl MarkedEventReceiver for LineRecorder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let line = mark.line();
        match ev {
            Event::DocumentStart => {
                self.docs.push(BTreeMap::new());
                self.stack.clear();
            }
            Event::Scalar(s, ..) => {
                self.child_path(line, Some(&s));
            }
            Event::Alias(_) => {
                self.child_path(line, None);
            }
            Event::MappingStart(..) => {
                let path = self.child_path(line, None).unwrap_or_default();
                self.stack.push(Frame::Map { path, key: None });
            }
            Event::SequenceStart(..) => {
                let path = self.child_path(line, None).unwrap_or_default();
                self.stack.push(Frame::Seq { path, next: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

fn line_maps(text: &str) -> Result<Vec<BTreeMap<String, usize>>, SourceError> {
    let mut rec = LineRecorder::default();
    Parser::new_from_str(text)
        .load(&mut rec, true)
        .map_err(|e| SourceError::Yaml(e.to_string()))?;
    rec.docs.retain(|d| !d.is_empty());
    Ok(rec.docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_found_for_nested_paths() {
        let text = "apiVersion: ops.example.com/v1alpha1\nkind: PseudoFlow\nmetadata:\n  name: x\nspec:\n  steps:\n    - type: log\n      message: hi\n    - type: if\n      then:\n        - type: sleep\n          seconds: ten\n";
        let doc = load(text).unwrap().remove(0);
        assert_eq!(doc.line_of("spec.steps[0].message"), Some(8));
        assert_eq!(doc.line_of("spec.steps[1].then[0].seconds"), Some(12));
        assert_eq!(doc.line_of("spec.steps[1].then[0].nope"), Some(11));
    }

    #[test]
    fn non_flows_are_refused() {
        let e = load("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap_err();
        assert!(e.to_string().contains("not a PseudoFlow"), "{e}");
    }
}
