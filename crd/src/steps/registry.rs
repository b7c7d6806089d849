//! The one list of step types: `type:` name → parameter struct. The macro derives the
//! [`StepKind`] enum, the list of names, the per-type schema lookup and the dispatch to
//! [`StepParams`]. Two places still list every type by hand, on purpose: where a step is
//! executed (`runtime-image/src/steps/mod.rs`, in a Job) and `compiler/src/runtime/local.rs` (in
//! the controller). Neither has a `_` arm, so a type added here does not compile until both
//! have decided what it does (see docs/architecture.md, "Adding a step type").

use schemars::{generate::SchemaSettings, Schema};
use serde::{Deserialize, Serialize};

use super::*;

macro_rules! step_registry {
    ($($variant:ident => $params:ty = $tag:literal,)*) => {
        /// A step's type-specific part; serialised with `type:` as the tag.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "type")]
        pub enum StepKind {
            $(
                #[doc = concat!("A `", $tag, "` step.")]
                #[serde(rename = $tag)]
                $variant($params),
            )*
        }

        /// Every valid `type:` value, in registry order.
        pub const STEP_TYPES: &[&str] = &[$($tag),*];

        impl StepKind {
            /// The `type:` value of this step.
            pub fn type_name(&self) -> &'static str {
                match self { $(Self::$variant(_) => $tag,)* }
            }

            /// The step's parameters as the common trait.
            pub fn params(&self) -> &dyn StepParams {
                match self { $(Self::$variant(p) => p,)* }
            }
        }

        /// The generated schema of one step type's parameters (without the common fields).
        pub fn params_schema(tag: &str) -> Option<Schema> {
            let settings = SchemaSettings::openapi3().with(|s| {
                s.inline_subschemas = true;
                s.meta_schema = None;
            });
            let generator = settings.into_generator();
            match tag {
                $($tag => Some(generator.into_root_schema_for::<$params>()),)*
                _ => None,
            }
        }
    };
}

step_registry! {
    Log => log::LogStep = "log",
    Sleep => sleep::SleepStep = "sleep",
    Apply => apply::ApplyStep = "apply",
    Delete => delete::DeleteStep = "delete",
    ApplyFile => apply_file::ApplyFileStep = "applyFile",
    DeleteFile => delete_file::DeleteFileStep = "deleteFile",
    Include => include::IncludeStep = "include",
    If => r#if::IfStep = "if",
    When => when::WhenStep = "when",
    Exec => exec::ExecStep = "exec",
    ExecNode => exec_node::ExecNodeStep = "execNode",
    ConfigFile => config_file::ConfigFileStep = "configFile",
    PatchFile => patch_file::PatchFileStep = "patchFile",
    Template => template::TemplateStep = "template",
    Script => script::ScriptStep = "script",
    SetLabel => set_label::SetLabelStep = "setLabel",
    RemoveLabel => remove_label::RemoveLabelStep = "removeLabel",
    PatchLabel => patch_label::PatchLabelStep = "patchLabel",
    Loop => r#loop::LoopStep = "loop",
    LoopNodes => loop_nodes::LoopNodesStep = "loopNodes",
    Parallel => parallel::ParallelStep = "parallel",
    WaitFor => wait_for::WaitForStep = "waitFor",
    Retry => retry::RetryStep = "retry",
    OnError => on_error::OnErrorStep = "onError",
    IncludeFlow => include_flow::IncludeFlowStep = "includeFlow",
    Eval => eval::EvalStep = "eval",
    Copy => copy::CopyStep = "copy",
    Cordon => cordon::CordonStep = "cordon",
    Drain => drain::DrainStep = "drain",
    Uncordon => uncordon::UncordonStep = "uncordon",
    Approval => approval::ApprovalStep = "approval",
}
