-- GET /healthz, each request built in Lua exactly as get.lua builds its GETs (a random key
-- from KEYS picked, the request formatted): the same client cost per request, so the ratio of
-- GET to this measures the server alone.
local keys = {}
function init(args)
  for line in io.lines(os.getenv("KEYS")) do keys[#keys + 1] = line end
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end
request = function()
  local _ = keys[math.random(#keys)]
  return wrk.format("GET", "/healthz")
end
