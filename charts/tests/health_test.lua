-- Runs argocd/health.lua against statuses the controller writes; exits non-zero on a mismatch.
local script = assert(io.open(arg[1] or "pseudoflow-operator/argocd/health.lua")):read("a")
local failures = 0
local total = 0
local function check(name, o, want_status, want_message)
  local env = setmetatable({obj = o}, {__index = _G})
  local hs = assert(load(script, "health.lua", "t", env))()
  local ok = hs.status == want_status and (want_message == nil or string.find(hs.message, want_message, 1, true))
  print((ok and "ok   " or "FAIL ") .. name .. ": " .. hs.status .. " (" .. hs.message .. ")")
  total = total + 1
  if not ok then failures = failures + 1 end
end
check("no status yet", {metadata = {generation = 1}}, "Progressing", "Waiting")
check("running", {metadata = {generation = 1}, status = {observedGeneration = 1, phase = "Running", message = "step s3-s0 on worker-0"}}, "Progressing", "s3-s0")
check("succeeded", {metadata = {generation = 2}, status = {observedGeneration = 2, phase = "Succeeded", message = "9/9 steps"}}, "Healthy", "9/9")
check("succeeded but stale generation", {metadata = {generation = 3}, status = {observedGeneration = 2, phase = "Succeeded"}}, "Progressing", "generation 3")
check("invalid spec", {metadata = {generation = 1}, status = {observedGeneration = 1, phase = "Failed", reason = "InvalidSpec", message = "spec.steps[3].seconds: expected integer"}}, "Degraded", "InvalidSpec: spec.steps[3]")
check("timed out", {metadata = {generation = 1}, status = {observedGeneration = 1, phase = "Failed", reason = "Timeout"}}, "Degraded", "Timeout")
check("aborted by Replace", {metadata = {generation = 4}, status = {observedGeneration = 4, phase = "Aborted"}}, "Degraded", "Aborted")
check("pending (queued by Forbid)", {metadata = {generation = 1}, status = {observedGeneration = 1, phase = "Pending"}}, "Progressing", nil)
-- Flows with no run that will not start one by themselves, as the controller writes them
-- (reconcile/schedule.rs idle(); controller/tests/argocd_health.rs feeds the real objects).
local function idle(reason, message, spec)
  return {metadata = {generation = 1}, spec = spec, status = {observedGeneration = 1, phase = "Pending", reason = reason, message = message}}
end
check("library flow (includeOnly)", idle("IncludeOnly", "included only: its steps run in the flows that include it (includeFlow), never on their own", {includeOnly = true}), "Healthy", "IncludeOnly: included only")
check("scheduled flow before its first slot", idle("WaitingForSchedule", "waiting for the schedule: next run at 2026-01-05T10:08:00Z", {schedule = "* * * * *"}), "Healthy", "WaitingForSchedule")
check("flow created suspended", idle("Suspended", "suspended: no run starts while spec.suspend is true", {suspend = true}), "Healthy", "Suspended: suspended")
check("schedule with no further slot", idle("ScheduleEnded", "the schedule has no further slot", {schedule = "0 0 29 2 *"}), "Healthy", "ScheduleEnded")
check("running run held by suspend is not settled", {metadata = {generation = 1}, spec = {suspend = true}, status = {observedGeneration = 1, phase = "Running", reason = "Suspended", message = "suspended: 1/3 steps done"}}, "Progressing", "Suspended")
-- A re-run asked for in git (ops.example.com/run) does not bump the generation: Progressing until
-- the controller's current run carries that trigger, then as its phase says.
local function rerun(asked, run, phase, spec)
  return {metadata = {generation = 2, annotations = {["ops.example.com/run"] = asked}}, spec = spec or {},
          status = {observedGeneration = 2, phase = phase, run = run}}
end
check("re-run asked, old run succeeded", rerun("2", {id = "a", generation = 2, trigger = "1"}, "Succeeded"), "Progressing", "re-run 2")
check("re-run asked, first annotation on a run without trigger", rerun("1", {id = "a", generation = 2}, "Succeeded"), "Progressing", "re-run 1")
check("re-run asked, old run failed", rerun("2", {id = "a", generation = 2, trigger = "1"}, "Failed"), "Progressing", "re-run 2")
check("re-run running", rerun("2", {id = "b", generation = 2, trigger = "2"}, "Running"), "Progressing", nil)
check("re-run succeeded", rerun("2", {id = "b", generation = 2, trigger = "2"}, "Succeeded"), "Healthy", nil)
check("re-run failed", rerun("2", {id = "b", generation = 2, trigger = "2"}, "Failed"), "Degraded", nil)
check("re-run on a suspended flow", rerun("2", {id = "a", generation = 2, trigger = "1"}, "Succeeded", {suspend = true}), "Progressing", "suspended")
check("scheduled flow: trigger is the slot", rerun("2", {id = "a", generation = 2, trigger = "schedule 2026-01-01T00:00:00Z"}, "Succeeded", {schedule = "0 * * * *"}), "Healthy", nil)
check("library flow: a run annotation asks for nothing", {metadata = {generation = 2, annotations = {["ops.example.com/run"] = "2"}}, spec = {includeOnly = true},
      status = {observedGeneration = 2, phase = "Pending", reason = "IncludeOnly", message = "included only"}}, "Healthy", "IncludeOnly")
check("retry of the re-run succeeded (a retry keeps the trigger)", rerun("2", {id = "c", generation = 2, trigger = "2", retryOf = "b"}, "Succeeded"), "Healthy", nil)
check("re-run asked after a retry", rerun("3", {id = "c", generation = 2, trigger = "2", retryOf = "b"}, "Succeeded"), "Progressing", "re-run 3")
check("annotation but invalid spec (no run)", {metadata = {generation = 1, annotations = {["ops.example.com/run"] = "2"}}, status = {observedGeneration = 1, phase = "Failed", reason = "InvalidSpec", message = "spec.steps[0]: bad"}}, "Degraded", "InvalidSpec")
-- A flow bound to a kind rolling a revision out (status.bound.rollout): Stopped is Degraded naming
-- the revision and the failing objects, Paused is Suspended, Progressing is Progressing,
-- Completed is the flow's own verdict; a stale generation is still Progressing first.
local function bound(phase, rollout, generation)
  return {metadata = {generation = 2}, spec = {bind = {apiVersion = "example.com/v1", kind = "Widget"}},
          status = {observedGeneration = generation or 2, phase = phase, reason = "Bound", message = "3 Widget object(s)",
                    bound = {objects = 3, creating = 0, running = 3, failed = 0, rollout = rollout}}}
end
local function rollout(phase, extra)
  local r = {revision = "widgets-2b", from = "widgets-1a", phase = phase, wave = 2, waves = 3, target = 2, updated = 1}
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end
check("rollout stopped", bound("Succeeded", rollout("Stopped", {failedObjects = {"team/w-1", "team/w-2"}, message = "2 objects failed (maxFailures 1)"})), "Degraded", "Rollout of revision widgets-2b stopped, failed: team/w-1, team/w-2 (2 objects failed")
check("rollout stopped on a flow whose objects failed", bound("Failed", rollout("Stopped")), "Degraded", "widgets-2b stopped")
check("rollout paused", bound("Succeeded", rollout("Paused", {lastAction = {action = "pause", user = "alice", time = "2026-12-07T15:00:00Z"}})), "Suspended", "widgets-2b paused at wave 2/3 by alice")
check("rollout paused but objects failed", bound("Failed", rollout("Paused")), "Degraded", "Bound")
check("rollout progressing", bound("Succeeded", rollout("Progressing")), "Progressing", "widgets-2b: wave 2/3, 1/2 objects updated")
check("rollout completed", bound("Succeeded", rollout("Completed", {wave = 3, target = 3, updated = 3})), "Healthy", "Bound: 3 Widget")
check("rollout completed, object runs going", bound("Running", rollout("Completed")), "Progressing", "Bound")
check("rollout stopped but generation not observed", bound("Succeeded", rollout("Stopped"), 1), "Progressing", "generation 2")
check("bound flow without a rollout", bound("Succeeded", nil), "Healthy", "Bound")
print((failures == 0) and (total .. " passed, 0 failed") or ((total - failures) .. " passed, " .. failures .. " failed"))
os.exit(failures == 0 and 0 or 1)
