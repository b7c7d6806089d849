-- Argo CD health check for ops.example.com/PseudoFlow (resource.customizations.health.ops.example.com_PseudoFlow).
-- Healthy only when the latest spec ran to Succeeded; Degraded on Failed/Aborted (including an
-- invalid spec); Progressing while a run is pending or running or the controller has not yet
-- observed the newest generation, or while a re-run asked for with the ops.example.com/run
-- annotation (which does not bump metadata.generation) has not yet run: its value must be the
-- current run's status.run.trigger (a retry keeps the trigger of the run it retries). Scheduled
-- flows (their runs' triggers are schedule slots) and library flows (includeOnly: they never
-- run) are not compared; a suspended flow's re-run waits for resume and says so.
-- A flow with no run that will not get one by itself is settled, so Healthy (a later sync wave
-- starts): the controller writes Pending with reason IncludeOnly (a library), Suspended (created
-- suspended), WaitingForSchedule (before its first slot) or ScheduleEnded. Not Argo CD's
-- Suspended: a sync wave waits on it as on Progressing. Any other Pending (a queued run) is
-- Progressing.
-- A flow bound to a kind rolling a new revision out to its objects (status.bound.rollout,
-- docs/bound-flows.md#rollouts): Stopped (maxFailures of its objects failed) is Degraded, naming
-- the revision and the failing objects; Paused by hand (kubectl pf rollout pause) is Suspended
-- (a sync wave waits, as it should: the rollout owes work); Progressing is Progressing. Judged
-- after the checks above; a Degraded flow stays Degraded; Completed leaves the flow's own verdict.
local settled = {IncludeOnly = true, Suspended = true, WaitingForSchedule = true, ScheduleEnded = true}
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
local spec = obj.spec or {}
local asked = obj.metadata and obj.metadata.annotations and obj.metadata.annotations["ops.example.com/run"]
local run = obj.status.run
if asked ~= nil and run ~= nil and run.trigger ~= asked
    and (spec.schedule == nil or spec.schedule == "") and not spec.includeOnly then
  hs.status = "Progressing"
  if spec.suspend then
    hs.message = "Re-run " .. asked .. " waits: the flow is suspended"
  else
    hs.message = "Waiting for the controller to start the re-run " .. asked
  end
  return hs
end
local phase = obj.status.phase
if phase == "Succeeded" or (phase == "Pending" and settled[obj.status.reason]) then
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
local rollout = obj.status.bound and obj.status.bound.rollout
if rollout == nil then
  return hs
end
local revision = tostring(rollout.revision)
if rollout.phase == "Stopped" then
  hs.status = "Degraded"
  hs.message = "Rollout of revision " .. revision .. " stopped"
  if rollout.failedObjects ~= nil and #rollout.failedObjects > 0 then
    hs.message = hs.message .. ", failed: " .. table.concat(rollout.failedObjects, ", ")
  end
  if rollout.message ~= nil then
    hs.message = hs.message .. " (" .. rollout.message .. ")"
  end
elseif hs.status ~= "Degraded" and rollout.phase == "Paused" then
  hs.status = "Suspended"
  hs.message = "Rollout of revision " .. revision .. " paused at wave " .. tostring(rollout.wave) .. "/" .. tostring(rollout.waves)
  local last = rollout.lastAction
  if last ~= nil and last.action == "pause" then
    hs.message = hs.message .. " by " .. tostring(last.user)
  end
elseif hs.status ~= "Degraded" and rollout.phase == "Progressing" then
  hs.status = "Progressing"
  hs.message = "Rollout of revision " .. revision .. ": wave " .. tostring(rollout.wave) .. "/" .. tostring(rollout.waves) .. ", " .. tostring(rollout.updated) .. "/" .. tostring(rollout.target) .. " objects updated"
end
return hs
