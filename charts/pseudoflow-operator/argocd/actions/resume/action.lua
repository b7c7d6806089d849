-- Argo CD action "resume": spec.suspend = false, as `kubectl pf resume` does (a held run goes on
-- where it stopped). Lasts under self-heal only while Git does not set spec.suspend.
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.suspend = false
return obj
