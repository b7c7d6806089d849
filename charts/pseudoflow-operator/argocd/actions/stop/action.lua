-- Argo CD action "stop": ends the running run now, as `kubectl pf stop` does, by naming it in
-- ops.example.com/stop (its running Jobs deleted, no further step started, the run Aborted).
local status = obj.status or {}
if status.phase ~= "Running" or status.run == nil then
  error("no run of " .. obj.metadata.name .. " is running: nothing to stop", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["ops.example.com/stop"] = status.run.id
return obj
