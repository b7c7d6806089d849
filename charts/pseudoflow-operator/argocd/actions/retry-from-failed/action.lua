-- Argo CD action "retry-from-failed": retries the last run from its failed step, keeping the steps
-- that succeeded, by a fresh ops.example.com/retry value (what `kubectl pf retry` sets); a
-- retry-from left by an earlier retry is removed, so it restarts at the failed step.
-- Argo CD runs actions without the os global: its "os" module is loaded with require.
local os = require("os")
local status = obj.status or {}
if status.run == nil then
  error(obj.metadata.name .. " has no run to retry yet", 0)
end
if status.phase ~= "Failed" and status.phase ~= "Aborted" then
  error("run " .. status.run.id .. " of " .. obj.metadata.name .. " is " .. tostring(status.phase) .. ": only a failed or stopped run is retried", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
local token = "argocd-" .. os.date("!%Y%m%dT%H%M%SZ")
if obj.metadata.annotations["ops.example.com/retry"] == token then
  token = token .. "-1"
end
obj.metadata.annotations["ops.example.com/retry"] = token
obj.metadata.annotations["ops.example.com/retry-from"] = nil
return obj
