-- POST /batch of BATCH puts (default 100) over random existing keys from KEYS; VALUE_SIZE-byte
-- values (hex in the JSON). Each request touches about BATCH partitions out of 256.
local keys = {}
local batch, value
function init(args)
  for line in io.lines(os.getenv("KEYS")) do keys[#keys + 1] = line end
  batch = tonumber(os.getenv("BATCH") or "100")
  value = string.rep("62", tonumber(os.getenv("VALUE_SIZE") or "32"))
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end
request = function()
  local ops = {}
  for i = 1, batch do
    ops[i] = '{"op":"put","key":"' .. keys[math.random(#keys)] .. '","value":"' .. value .. '"}'
  end
  return wrk.format("POST", "/batch", {["Content-Type"] = "application/json"}, '{"ops":[' .. table.concat(ops, ",") .. ']}')
end
