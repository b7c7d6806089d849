-- Argo CD action "suspend": spec.suspend = true, as `kubectl pf suspend` does (a running run holds:
-- its running steps finish, no new step starts). Lasts under self-heal only while Git does not set spec.suspend.
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.suspend = true
return obj
