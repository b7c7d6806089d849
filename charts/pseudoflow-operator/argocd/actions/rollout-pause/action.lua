-- Argo CD action "rollout-pause": sets ops.example.com/rollout=pause on a flow bound to a kind, as
-- `kubectl pf rollout pause` does (no further object gets the new revision until resume). The
-- admission webhook refuses it unless the identity Argo CD patches with may `rollout` pseudoflows
-- (docs/gitops.md, "Rollouts through Argo CD"), and its stamp names that identity.
local name = obj.metadata.name
local rollout = ((obj.status or {}).bound or {}).rollout
if rollout == nil then
  error("PseudoFlow " .. name .. " has no rollout (not bound to a kind, or no revision kept yet)", 0)
end
if rollout.phase == "Paused" or rollout.phase == "Completed" then
  error("the rollout of revision " .. tostring(rollout.revision) .. " is " .. rollout.phase .. ": nothing to pause", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
if obj.metadata.annotations["ops.example.com/rollout"] == "pause" then
  error("ops.example.com/rollout is already pause from an earlier request: use kubectl pf rollout pause " .. name .. " (or remove the annotation first)", 0)
end
obj.metadata.annotations["ops.example.com/rollout"] = "pause"
return obj
