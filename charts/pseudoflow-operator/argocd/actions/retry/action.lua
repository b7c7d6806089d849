-- Argo CD action "retry": a new run of the whole flow, by a fresh ops.example.com/run value (the
-- run annotation GitOps sets too). If Git sets ops.example.com/run on this flow, self-heal puts
-- Git's value back (another run): change it in Git instead, or use retry-from-failed.
-- Argo CD runs actions without the os global: its "os" module is loaded with require.
local os = require("os")
local phase = (obj.status or {}).phase
if phase == "Running" or phase == "Pending" then
  error("a run of " .. obj.metadata.name .. " is " .. phase .. ": run again once it has ended", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
local value = "argocd-" .. os.date("!%Y%m%dT%H%M%SZ")
if obj.metadata.annotations["ops.example.com/run"] == value then
  value = value .. "-1"
end
obj.metadata.annotations["ops.example.com/run"] = value
return obj
