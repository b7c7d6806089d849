//! What `kubectl pf plan` does with a step of each type (`cli/src/plan.rs`): every type says it
//! in its own module ([`StepParams::plan_as`](super::StepParams::plan_as), a required hook), so a
//! new type cannot silently show as changing no object.

/// How `kubectl pf plan` treats a step type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanAs {
    /// Changes no object the plan could show (`waitFor`, `exec`, `log`, ...): not listed.
    NoChange,
    /// Holds steps of its own, walked in its place, behind what [`Nesting`] says.
    Nested(Nesting),
    /// Guards the step after it in the same list (`when`): that step is undetermined.
    GuardsNext,
    /// Acts on nodes: listed with the nodes it runs on, not previewed.
    OnNodes,
    /// Acts on nodes in a node context (inside `loopNodes` or with `nodeSelector`, as its
    /// placement says); otherwise previewed as given (`deleteFile`).
    OnNodesInNodeContext(Preview),
    /// Changes objects the plan cannot know before the run: listed as undetermined, with why.
    Undetermined(&'static str),
    /// Changes objects the plan previews by server-side dry-run, as given.
    Preview(Preview),
}

/// Where a compound step's nested steps run, as the plan says of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nesting {
    /// Whenever the step runs (`retry`).
    Always,
    /// In a branch chosen at run time (`if`).
    Branch,
    /// Once per item known at run time (`loop`).
    Items,
    /// When a step before it fails (`onError`).
    OnError,
    /// On each node its selector picks (`loopNodes`).
    EachNode,
    /// In parallel branches, each a list of steps (`parallel`).
    Branches,
}

/// The object changes a step's preview makes by dry-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preview {
    /// Applies its inline manifests.
    Apply,
    /// Applies the objects of an artifact file.
    ApplyFile,
    /// Deletes the objects of an artifact file.
    DeleteFile,
    /// Deletes its target.
    Delete,
    /// Sets labels on its target.
    SetLabel,
    /// Removes labels from its target.
    RemoveLabel,
    /// Copies a Secret or ConfigMap.
    Copy,
}
