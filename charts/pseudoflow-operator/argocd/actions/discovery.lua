-- Argo CD action discovery for ops.example.com/PseudoFlow: which actions the flow offers now.
-- approve/reject: exactly one approval step waits (the actions name it; with several waiting, use
-- `kubectl pf approve NAME STEP`). retry: a new run of the whole flow once no run is going.
-- retry-from-failed: the last run failed or was stopped. stop: a run is running.
-- suspend/resume: spec.suspend. rollout-pause/-resume/-promote/-undo: only for a flow bound to a
-- kind with a rollout (status.bound.rollout): pause while it goes, resume while paused, promote
-- until it completed, undo when there is a previous revision.
local actions = {}
local status = obj.status or {}
local spec = obj.spec or {}
local waiting = 0
for _, step in ipairs(status.steps or {}) do
  if step.type == "approval" and step.phase == "Running" and step.name ~= nil then
    waiting = waiting + 1
  end
end
local phase = status.phase
local going = phase == "Running" or phase == "Pending"
local library = spec.includeOnly == true
actions["approve"] = {["disabled"] = waiting ~= 1, ["iconClass"] = "fa fa-fw fa-check", ["displayName"] = "Approve the waiting step"}
actions["reject"] = {["disabled"] = waiting ~= 1, ["iconClass"] = "fa fa-fw fa-times", ["displayName"] = "Reject the waiting step"}
actions["retry"] = {["disabled"] = going or library, ["iconClass"] = "fa fa-fw fa-redo", ["displayName"] = "Run again"}
actions["retry-from-failed"] = {["disabled"] = status.run == nil or not (phase == "Failed" or phase == "Aborted"), ["iconClass"] = "fa fa-fw fa-redo", ["displayName"] = "Retry from the failed step"}
actions["stop"] = {["disabled"] = phase ~= "Running" or status.run == nil, ["iconClass"] = "fa fa-fw fa-stop-circle", ["displayName"] = "Stop the running run"}
actions["suspend"] = {["disabled"] = spec.suspend == true, ["iconClass"] = "fa fa-fw fa-pause-circle", ["displayName"] = "Suspend"}
actions["resume"] = {["disabled"] = spec.suspend ~= true, ["iconClass"] = "fa fa-fw fa-play-circle", ["displayName"] = "Resume"}
local rollout = (status.bound or {}).rollout
if rollout ~= nil then
  local rp = rollout.phase
  actions["rollout-pause"] = {["disabled"] = rp == "Paused" or rp == "Completed", ["iconClass"] = "fa fa-fw fa-pause", ["displayName"] = "Pause the rollout"}
  actions["rollout-resume"] = {["disabled"] = rp ~= "Paused", ["iconClass"] = "fa fa-fw fa-play", ["displayName"] = "Resume the rollout"}
  actions["rollout-promote"] = {["disabled"] = rp == "Completed", ["iconClass"] = "fa fa-fw fa-forward", ["displayName"] = "Promote the rollout"}
  actions["rollout-undo"] = {["disabled"] = rollout.from == nil, ["iconClass"] = "fa fa-fw fa-undo", ["displayName"] = "Undo the rollout"}
end
return actions
