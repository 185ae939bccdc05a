-- Argo CD health of a Switchboard resource (McpServer, McpVirtualServer, McpKey, ModelRoute,
-- IdentityProvider), read from the conditions the operator writes:
--   Progressing  the operator has not seen this generation yet, a readiness probe has not
--                answered yet (Ready Unknown, Probing), or not every gateway replica serves it
--                yet (Programmed False, or Ready False with reason Pending for an McpKey or an
--                IdentityProvider), or its pods are starting (Running False)
--   Degraded     refused (Accepted False: the reason says why, e.g. SecretNotFound,
--                PrefixConflict, NameReserved) or not ready (Ready False: e.g. UpstreamTimeout)
--   Healthy      accepted, served, and ready (or ready depends on each caller: DependsOnCaller)
-- The same script serves every kind (argocd-cm.yaml installs it once per kind).
local hs = {}

local function condition(type)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function says(c)
  return (c.reason or "") .. ": " .. (c.message or "")
end

local accepted = condition("Accepted")
if accepted == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Switchboard operator"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and accepted.observedGeneration ~= nil and accepted.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to see generation " .. generation
  return hs
end
if accepted.status == "False" then
  hs.status = "Degraded"
  hs.message = says(accepted)
  return hs
end

local ready = condition("Ready")
-- An McpKey's or IdentityProvider's Ready is False (Pending) while gateway replicas catch up:
-- a rollout, not a failure.
if ready ~= nil and ready.status == "False" and ready.reason == "Pending" then
  hs.status = "Progressing"
  hs.message = says(ready)
  return hs
end
if ready ~= nil and ready.status == "False" then
  hs.status = "Degraded"
  hs.message = says(ready)
  return hs
end
if ready ~= nil and ready.status == "Unknown" and ready.reason ~= "DependsOnCaller" then
  hs.status = "Progressing"
  hs.message = says(ready)
  return hs
end
for _, type in ipairs({ "Running", "Programmed" }) do
  local c = condition(type)
  if c ~= nil and c.status ~= "True" then
    hs.status = "Progressing"
    hs.message = says(c)
    return hs
  end
end

hs.status = "Healthy"
hs.message = says(ready or accepted)
return hs
