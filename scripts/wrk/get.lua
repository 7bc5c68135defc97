-- GET /kv/<key> of random existing keys from KEYS (a file of hex keys, one a line). With
-- HEALTHZ=1, GET /healthz instead, each request built exactly as the GETs are (a random key
-- picked, the request formatted): the same client cost per request, so the ratio of GET to it
-- measures the server alone.
local keys = {}
local path = os.getenv("HEALTHZ") == "1" and function(_) return "/healthz" end
  or function(key) return "/kv/" .. key end
function init(args)
  for line in io.lines(os.getenv("KEYS")) do keys[#keys + 1] = line end
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end
request = function()
  return wrk.format("GET", path(keys[math.random(#keys)]))
end
