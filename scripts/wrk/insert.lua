-- PUT /kv/<new key>: every key unique (run, thread, counter); VALUE_SIZE-byte values.
local n = 0
function setup(thread)
  n = n + 1
  thread:set("tid", n)
  thread:set("run", os.time())
end
local counter = 0
local body
function init(args)
  body = string.rep("v", tonumber(os.getenv("VALUE_SIZE") or "32"))
end
request = function()
  counter = counter + 1
  local key = string.format("%016x%016x%016x%016x", run, tid, counter, 0x696e73)
  return wrk.format("PUT", "/kv/" .. key, nil, body)
end
