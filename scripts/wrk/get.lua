-- GET /kv/<key> of random existing keys from KEYS (a file of hex keys, one a line).
local keys = {}
function init(args)
  for line in io.lines(os.getenv("KEYS")) do keys[#keys + 1] = line end
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end
request = function()
  return wrk.format("GET", "/kv/" .. keys[math.random(#keys)])
end
