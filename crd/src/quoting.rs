//! How `${...}` enters a shell command (`spec.shellQuoting`) and which pod settings, copy
//! targets and node-file lines may come from a bound object's data (`spec.allowObjectData`):
//! tenant data is data unless the author says otherwise (docs/decisions.md#quoted-by-default,
//! docs/decisions.md#tenant-data-never-chooses-where-a-step-acts).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API version whose flows splice `${...}` into commands as written (the old behaviour).
pub const RAW_VERSION: &str = "v1alpha1";
/// API version whose flows quote `${...}` in commands unless `| raw` says otherwise.
pub const QUOTED_VERSION: &str = "v1beta1";

/// How a `${...}` in a shell field (`exec.cmd`, `execNode.cmd`, `script.code`) is inserted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ShellQuoting {
    /// As one single-quoted shell word (`${x | raw}` opts out): the default of `v1beta1`.
    Quoted,
    /// As written, parsed by the shell (`${x | shq}` quotes): the default of `v1alpha1`, kept
    /// so that flows written before `v1beta1` do what they did.
    #[default]
    Raw,
}

impl ShellQuoting {
    /// The default a flow written in `api_version` gets (the CRD's per-version schema default;
    /// the CLI applies it to files, where no API server defaults).
    pub fn default_for(api_version: &str) -> Self {
        if api_version.ends_with(QUOTED_VERSION) {
            ShellQuoting::Quoted
        } else {
            ShellQuoting::Raw
        }
    }

    /// The value as the CRD schema writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ShellQuoting::Quoted => "quoted",
            ShellQuoting::Raw => "raw",
        }
    }
}

/// Gives a flow document read without an API server (a file) the `spec.shellQuoting` the API
/// server would store for its `apiVersion`, when it sets none.
pub fn default_by_version(object: &mut serde_json::Value) {
    let version = object["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(spec) = object.get_mut("spec").and_then(|s| s.as_object_mut()) {
        spec.entry("shellQuoting")
            .or_insert_with(|| ShellQuoting::default_for(&version).as_str().into());
    }
}

/// A setting that is refused when an expression in it reads a bound object's data, unless the
/// flow names it in `spec.allowObjectData`: a pod setting of the step's own, or one of the two
/// choices a tenant may be let make where the step contains them (a warning when allowed).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum ObjectDataField {
    /// A step's `image`: the tenant would pick the code that runs.
    Image,
    /// `serviceAccountName`: the tenant would pick the identity steps run as.
    ServiceAccountName,
    /// A step's `namespace`: the tenant would pick where the flow's ServiceAccount acts.
    Namespace,
    /// A step's `nodeSelector`, or the `node` a `cordon`/`drain`/`uncordon` changes: the
    /// tenant would pick the nodes a step changes (warned when allowed for the latter).
    NodeSelector,
    /// The namespace a `copy` writes to (`to[].namespace`) or a `delete` with `onlyCopies`
    /// deletes in (`target.namespace`): steps that touch only copies this flow made. Every
    /// other namespace or kind of an object a step acts on is refused whatever this says.
    TargetNamespace,
    /// Line breaks in tenant data written into a node file (`configFile.content`,
    /// `patchFile.replace`): without this, such a value must be written `${ x | oneline }`,
    /// which fails the step on a value with a line break.
    NodeFileLines,
}

impl ObjectDataField {
    /// Every guarded pod setting (a field of the step itself).
    pub const ALL: [ObjectDataField; 4] = [
        ObjectDataField::Image,
        ObjectDataField::ServiceAccountName,
        ObjectDataField::Namespace,
        ObjectDataField::NodeSelector,
    ];

    /// The value as `spec.allowObjectData` writes it; for a pod setting, the field name as
    /// written in a step (`image`, `nodeSelector`...).
    pub fn field(self) -> &'static str {
        match self {
            ObjectDataField::Image => "image",
            ObjectDataField::ServiceAccountName => "serviceAccountName",
            ObjectDataField::Namespace => "namespace",
            ObjectDataField::NodeSelector => "nodeSelector",
            ObjectDataField::TargetNamespace => "targetNamespace",
            ObjectDataField::NodeFileLines => "nodeFileLines",
        }
    }

    /// The guarded setting a field is in, given its path relative to its step (`.image`,
    /// `.nodeSelector.matchLabels.x`): the step's own field, not one inside its manifests.
    pub fn of_field(relative: &str) -> Option<ObjectDataField> {
        let first = relative.trim_start_matches('.').split(['.', '[']).next()?;
        Self::ALL.into_iter().find(|f| f.field() == first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_version_decides_the_default() {
        assert_eq!(
            ShellQuoting::default_for("ops.example.com/v1beta1"),
            ShellQuoting::Quoted
        );
        assert_eq!(
            ShellQuoting::default_for("ops.example.com/v1alpha1"),
            ShellQuoting::Raw
        );
    }

    #[test]
    fn a_file_gets_its_versions_default_unless_it_says() {
        let mut beta = serde_json::json!({"apiVersion": "ops.example.com/v1beta1", "spec": {}});
        default_by_version(&mut beta);
        assert_eq!(beta["spec"]["shellQuoting"], "quoted");
        let mut said = serde_json::json!({"apiVersion": "ops.example.com/v1beta1",
            "spec": {"shellQuoting": "raw"}});
        default_by_version(&mut said);
        assert_eq!(said["spec"]["shellQuoting"], "raw");
    }

    #[test]
    fn a_path_names_its_guarded_setting() {
        use ObjectDataField::*;
        assert_eq!(ObjectDataField::of_field(".image"), Some(Image));
        assert_eq!(
            ObjectDataField::of_field(".nodeSelector.matchLabels.a"),
            Some(NodeSelector)
        );
        assert_eq!(ObjectDataField::of_field(".namespace"), Some(Namespace));
        assert_eq!(ObjectDataField::of_field(".cmd"), None);
        assert_eq!(
            ObjectDataField::of_field(".manifests.spec.containers[0].image"),
            None
        );
    }
}
