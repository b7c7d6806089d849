-- Runs the Argo CD resource actions (argocd/actions/) as Argo CD does: `obj` (and an empty
-- `actionParams`) as globals, the script's return value the answer; exits non-zero on a mismatch.
local dir = arg[1] or "pseudoflow-operator/argocd/actions"
local failures, total = 0, 0
local function read(path) return assert(io.open(dir .. "/" .. path)):read("a") end
local function copy(t)
  if type(t) ~= "table" then return t end
  local c = {}
  for k, v in pairs(t) do c[k] = copy(v) end
  return c
end
local function run(path, o)
  local env = setmetatable({obj = copy(o), actionParams = {}}, {__index = _G})
  return pcall(assert(load(read(path), path, "t", env)))
end
local function check(name, ok, detail)
  total = total + 1
  print((ok and "ok   " or "FAIL ") .. name .. (ok and "" or (": " .. tostring(detail))))
  if not ok then failures = failures + 1 end
end
local function flow(status, spec, annotations)
  return {apiVersion = "ops.example.com/v1alpha1", kind = "PseudoFlow",
          metadata = {name = "upgrade", namespace = "node-ops", annotations = annotations},
          spec = spec or {serviceAccountName = "flow"}, status = status}
end
local function waiting(...)
  local steps = {{id = "n0", path = "spec.steps[0]", type = "apply", phase = "Succeeded"}}
  for _, name in ipairs({...}) do
    steps[#steps + 1] = {id = name, path = "spec.steps[1]", type = "approval", name = name, phase = "Running"}
  end
  return {phase = "Running", run = {id = "r1", generation = 1}, steps = steps}
end
local function offered(o)
  local ok, actions = run("discovery.lua", o)
  assert(ok, actions)
  local on = {}
  for name, a in pairs(actions) do
    if not a.disabled then on[#on + 1] = name end
  end
  table.sort(on)
  return table.concat(on, ",")
end
local function expect(name, o, want)
  local got = offered(o)
  check("discovery " .. name .. ": " .. want, got == want, got)
end

-- Discovery: each action is listed, enabled only when it can do something.
local ok, all = run("discovery.lua", flow(nil))
local names = {}
for n, a in pairs(all) do names[#names + 1] = n; assert(a.displayName and a.iconClass) end
table.sort(names)
check("discovery lists the seven actions", table.concat(names, ",") == "approve,reject,resume,retry,retry-from-failed,stop,suspend", table.concat(names, ","))
expect("no status yet", flow(nil), "retry,suspend")
expect("one approval waits", flow(waiting("go")), "approve,reject,stop,suspend")
expect("two approvals wait", flow(waiting("a", "b")), "stop,suspend")
expect("failed", flow({phase = "Failed", run = {id = "r1", generation = 1}}), "retry,retry-from-failed,suspend")
expect("aborted", flow({phase = "Aborted", run = {id = "r1", generation = 1}}), "retry,retry-from-failed,suspend")
expect("succeeded", flow({phase = "Succeeded", run = {id = "r1", generation = 1}}), "retry,suspend")
expect("suspended", flow({phase = "Succeeded", run = {id = "r1", generation = 1}}, {suspend = true}), "resume,retry")
expect("library flow", flow({phase = "Succeeded"}, {includeOnly = true}), "suspend")

-- approve / reject: the annotation `kubectl pf approve|reject` sets, naming the waiting step.
for _, verb in ipairs({"approve", "reject"}) do
  local key = "ops.example.com/" .. verb
  local ok, out = run(verb .. "/action.lua", flow(waiting("go")))
  check(verb .. " names the waiting step", ok and out.metadata.annotations[key] == "go", out)
  check(verb .. " changes nothing else", ok and out.spec.serviceAccountName == "flow" and out.status.phase == "Running", out)
  local ok2, err = run(verb .. "/action.lua", flow(waiting("a", "b")))
  check(verb .. " refuses with two steps waiting", not ok2 and err:find("several approval steps wait", 1, true), err)
  local ok3, err3 = run(verb .. "/action.lua", flow({phase = "Succeeded", run = {id = "r1", generation = 1}}))
  check(verb .. " refuses with nothing waiting", not ok3 and err3:find("no approval step of upgrade waits", 1, true), err3)
  local ok4, err4 = run(verb .. "/action.lua", flow(waiting("go"), nil, {[key] = "go"}))
  check(verb .. " refuses a decision left from before (no change = no decision)", not ok4 and err4:find("from an earlier decision", 1, true), err4)
end

-- retry: a fresh ops.example.com/run value; refused while a run goes.
local ok, out = run("retry/action.lua", flow({phase = "Failed", run = {id = "r1", generation = 1}}, nil, {["ops.example.com/run"] = "1"}))
local value = ok and out.metadata.annotations["ops.example.com/run"]
check("retry sets a fresh run value", ok and value ~= "1" and value:find("^argocd%-%d+T%d+Z") ~= nil, value or out)
local ok2, out2 = run("retry/action.lua", flow({phase = "Failed"}, nil, {["ops.example.com/run"] = value}))
check("retry differs from the value already there", ok2 and out2.metadata.annotations["ops.example.com/run"] ~= value, out2)
local ok3, err3 = run("retry/action.lua", flow(waiting("go")))
check("retry refused while a run goes", not ok3 and err3:find("is Running", 1, true), err3)

-- stop: names the running run in ops.example.com/stop; refused when none runs.
local ok, out = run("stop/action.lua", flow(waiting("go")))
check("stop names the running run", ok and out.metadata.annotations["ops.example.com/stop"] == "r1" and out.status.phase == "Running", out)
local ok2, err2 = run("stop/action.lua", flow({phase = "Succeeded", run = {id = "r1", generation = 1}}))
check("stop refused with no run running", not ok2 and err2:find("nothing to stop", 1, true), err2)

-- retry-from-failed: a fresh ops.example.com/retry token, an old retry-from removed.
local ok, out = run("retry-from-failed/action.lua", flow({phase = "Failed", run = {id = "r1", generation = 1}}, nil, {["ops.example.com/retry-from"] = "finish"}))
check("retry-from-failed sets a retry token", ok and out.metadata.annotations["ops.example.com/retry"] ~= nil, out)
check("retry-from-failed drops an old retry-from", ok and out.metadata.annotations["ops.example.com/retry-from"] == nil, out)
local ok2, err2 = run("retry-from-failed/action.lua", flow({phase = "Succeeded", run = {id = "r1", generation = 1}}))
check("retry-from-failed refused after success", not ok2 and err2:find("only a failed or stopped run", 1, true), err2)
local ok3, err3 = run("retry-from-failed/action.lua", flow({phase = "Failed"}))
check("retry-from-failed refused without a run", not ok3 and err3:find("no run to retry", 1, true), err3)

-- suspend / resume: spec.suspend, nothing else.
local ok, out = run("suspend/action.lua", flow({phase = "Running"}))
check("suspend sets spec.suspend", ok and out.spec.suspend == true and out.spec.serviceAccountName == "flow", out)
local ok2, out2 = run("resume/action.lua", flow({phase = "Running"}, {suspend = true, serviceAccountName = "flow"}))
check("resume clears spec.suspend", ok2 and out2.spec.suspend == false and out2.spec.serviceAccountName == "flow", out2)

-- rollout-pause / -resume / -promote / -undo: offered only for a flow bound to a kind with a
-- rollout; each sets the ops.example.com/rollout value `kubectl pf rollout` sets, nothing else.
local function rolling(phase, from, annotations)
  return flow({phase = "Succeeded", bound = {objects = 3, creating = 0, running = 3, failed = 0,
    rollout = {revision = "upgrade-2b", from = from, phase = phase, wave = 1, waves = 2, target = 1, updated = 1}}},
    {serviceAccountName = "flow", bind = {apiVersion = "example.com/v1", kind = "Widget"}}, annotations)
end
local ok, listed = run("discovery.lua", rolling("Progressing", "upgrade-1a"))
local rnames = {}
for n, _ in pairs(listed) do if n:find("^rollout%-") then rnames[#rnames + 1] = n end end
table.sort(rnames)
check("discovery lists the four rollout actions for a bound flow with a rollout", ok and table.concat(rnames, ",") == "rollout-pause,rollout-promote,rollout-resume,rollout-undo", table.concat(rnames, ","))
expect("rollout progressing", rolling("Progressing", "upgrade-1a"), "retry,rollout-pause,rollout-promote,rollout-undo,suspend")
expect("rollout paused", rolling("Paused", "upgrade-1a"), "retry,rollout-promote,rollout-resume,rollout-undo,suspend")
expect("rollout stopped", rolling("Stopped", "upgrade-1a"), "retry,rollout-pause,rollout-promote,rollout-undo,suspend")
expect("rollout completed", rolling("Completed", "upgrade-1a"), "retry,rollout-undo,suspend")
expect("first rollout (no previous revision)", rolling("Progressing", nil), "retry,rollout-pause,rollout-promote,suspend")
for _, case in ipairs({{"pause", "Progressing"}, {"resume", "Paused"}, {"promote", "Stopped"}, {"undo", "Completed"}}) do
  local verb, phase = case[1], case[2]
  local path = "rollout-" .. verb .. "/action.lua"
  local ok, out = run(path, rolling(phase, "upgrade-1a"))
  check("rollout-" .. verb .. " sets ops.example.com/rollout=" .. verb, ok and out.metadata.annotations["ops.example.com/rollout"] == verb
    and out.metadata.annotations["ops.example.com/rollout-by"] == nil and out.spec.serviceAccountName == "flow", out)
  local ok2, err2 = run(path, flow({phase = "Succeeded"}))
  check("rollout-" .. verb .. " refused without a rollout", not ok2 and err2:find("has no rollout", 1, true), err2)
  local ok3, err3 = run(path, rolling(phase, "upgrade-1a", {["ops.example.com/rollout"] = verb}))
  check("rollout-" .. verb .. " refuses a request left from before (no change = no request)", not ok3 and err3:find("from an earlier request", 1, true), err3)
end
local ok, err = run("rollout-promote/action.lua", rolling("Completed", "upgrade-1a"))
check("rollout-promote refused once completed", not ok and err:find("nothing to promote", 1, true), err)
local ok, err = run("rollout-resume/action.lua", rolling("Progressing", "upgrade-1a"))
check("rollout-resume refused when not paused", not ok and err:find("is not paused", 1, true), err)
local ok, err = run("rollout-undo/action.lua", rolling("Progressing", nil))
check("rollout-undo refused without a previous revision", not ok and err:find("no previous revision", 1, true), err)

print(((total - failures) .. " passed, " .. failures .. " failed"))
os.exit(failures == 0 and 0 or 1)
