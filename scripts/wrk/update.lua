-- PUT /kv/<key> of random existing keys from KEYS: updates, VALUE_SIZE-byte values.
local keys = {}
local body
function init(args)
  for line in io.lines(os.getenv("KEYS")) do keys[#keys + 1] = line end
  body = string.rep("u", tonumber(os.getenv("VALUE_SIZE") or "32"))
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end
request = function()
  return wrk.format("PUT", "/kv/" .. keys[math.random(#keys)], nil, body)
end
