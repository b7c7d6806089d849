-- Runs argocd/health.lua against statuses the controller writes; exits non-zero on a mismatch.
local script = assert(io.open(arg[1] or "pseudoflow-operator/argocd/health.lua")):read("a")
local failures = 0
local function check(name, o, want_status, want_message)
  local env = setmetatable({obj = o}, {__index = _G})
  local hs = assert(load(script, "health.lua", "t", env))()
  local ok = hs.status == want_status and (want_message == nil or string.find(hs.message, want_message, 1, true))
  print((ok and "ok   " or "FAIL ") .. name .. ": " .. hs.status .. " (" .. hs.message .. ")")
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
print((failures == 0) and "8 passed, 0 failed" or ((8 - failures) .. " passed, " .. failures .. " failed"))
os.exit(failures == 0 and 0 or 1)
