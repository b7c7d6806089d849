-- Argo CD action "approve": sets ops.example.com/approve to the one approval step waiting, as
-- `kubectl pf approve` does. The admission webhook refuses it unless the identity Argo CD patches
-- with may `approve` pseudoflows (docs/gitops.md, "Approvals through Argo CD"); Argo CD's own
-- ServiceAccount must not have that verb.
local step = nil
for _, s in ipairs((obj.status or {}).steps or {}) do
  if s.type == "approval" and s.phase == "Running" and s.name ~= nil then
    if step ~= nil then
      error("several approval steps wait (" .. step .. ", " .. s.name .. "): decide with kubectl pf approve " .. obj.metadata.name .. " STEP", 0)
    end
    step = s.name
  end
end
if step == nil then
  error("no approval step of " .. obj.metadata.name .. " waits for a decision", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
if obj.metadata.annotations["ops.example.com/approve"] == step then
  error("ops.example.com/approve is already " .. step .. " from an earlier decision: remove it first (kubectl annotate pseudoflow " .. obj.metadata.name .. " ops.example.com/approve-)", 0)
end
obj.metadata.annotations["ops.example.com/approve"] = step
return obj
