-- Argo CD action "rollout-undo": sets ops.example.com/rollout=undo on a flow bound to a kind, as
-- `kubectl pf rollout undo` does (every object the new revision reached is served with the
-- previous one again, in the same waves). The admission webhook refuses it unless the identity
-- Argo CD patches with may `rollout` pseudoflows (docs/gitops.md, "Rollouts through Argo CD"), and
-- its stamp names that identity. Git still names the new spec: revert the commit too.
local name = obj.metadata.name
local rollout = ((obj.status or {}).bound or {}).rollout
if rollout == nil then
  error("PseudoFlow " .. name .. " has no rollout (not bound to a kind, or no revision kept yet)", 0)
end
if rollout.from == nil then
  error("the rollout of revision " .. tostring(rollout.revision) .. " has no previous revision to go back to", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
if obj.metadata.annotations["ops.example.com/rollout"] == "undo" then
  error("ops.example.com/rollout is already undo from an earlier request: use kubectl pf rollout undo " .. name .. " (or remove the annotation first)", 0)
end
obj.metadata.annotations["ops.example.com/rollout"] = "undo"
return obj
