-- Argo CD action "rollout-promote": sets ops.example.com/rollout=promote on a flow bound to a kind,
-- as `kubectl pf rollout promote` does (go to the last wave now, whatever failed). The admission
-- webhook refuses it unless the identity Argo CD patches with may `rollout` pseudoflows
-- (docs/gitops.md, "Rollouts through Argo CD"), and its stamp names that identity.
local name = obj.metadata.name
local rollout = ((obj.status or {}).bound or {}).rollout
if rollout == nil then
  error("PseudoFlow " .. name .. " has no rollout (not bound to a kind, or no revision kept yet)", 0)
end
if rollout.phase == "Completed" then
  error("revision " .. tostring(rollout.revision) .. " is rolled out to every object: nothing to promote", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
if obj.metadata.annotations["ops.example.com/rollout"] == "promote" then
  error("ops.example.com/rollout is already promote from an earlier request: use kubectl pf rollout promote " .. name .. " (or remove the annotation first)", 0)
end
obj.metadata.annotations["ops.example.com/rollout"] = "promote"
return obj
