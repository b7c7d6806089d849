-- Argo CD health check for ops.example.com/PseudoFlow (resource.customizations.health.ops.example.com_PseudoFlow).
-- Healthy only when the latest spec ran to Succeeded; Degraded on Failed/Aborted (including an
-- invalid spec); Progressing while a run is pending or running or the controller has not yet
-- observed the newest generation.
local hs = {}
if obj.status == nil or obj.status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the PseudoFlow controller"
  return hs
end
local generation = obj.metadata and obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to run generation " .. tostring(generation)
  return hs
end
local phase = obj.status.phase
if phase == "Succeeded" then
  hs.status = "Healthy"
elseif phase == "Failed" or phase == "Aborted" then
  hs.status = "Degraded"
else
  hs.status = "Progressing"
end
local message = obj.status.message
if obj.status.reason ~= nil then
  message = obj.status.reason .. ": " .. (message or phase)
end
hs.message = message or phase
return hs
