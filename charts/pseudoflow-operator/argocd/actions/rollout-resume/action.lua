-- Argo CD action "rollout-resume": sets ops.example.com/rollout=resume on a flow bound to a kind
-- whose rollout is paused, as `kubectl pf rollout resume` does. The admission webhook refuses it
-- unless the identity Argo CD patches with may `rollout` pseudoflows (docs/gitops.md, "Rollouts
-- through Argo CD"), and its stamp names that identity.
local name = obj.metadata.name
local rollout = ((obj.status or {}).bound or {}).rollout
if rollout == nil then
  error("PseudoFlow " .. name .. " has no rollout (not bound to a kind, or no revision kept yet)", 0)
end
if rollout.phase ~= "Paused" then
  error("the rollout of revision " .. tostring(rollout.revision) .. " is not paused (" .. tostring(rollout.phase) .. ")", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
if obj.metadata.annotations["ops.example.com/rollout"] == "resume" then
  error("ops.example.com/rollout is already resume from an earlier request: use kubectl pf rollout resume " .. name .. " (or remove the annotation first)", 0)
end
obj.metadata.annotations["ops.example.com/rollout"] = "resume"
return obj
