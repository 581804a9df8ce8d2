if wait > 0 then
  return {"rate_limited", math.max(1, math.ceil(wait / 1000)), 0, math.ceil(reset / 1000), ""}
end
local ck = KEYS[n + 1]
local hook = ARGV[2 * n + 2]
if not redis.call("SET", ck, "p:" .. hook, "NX", "PX", ARGV[2 * n + 3]) then
  local v = redis.call("GET", ck)
  local holder = string.sub(v, 3)
  if string.sub(v, 1, 2) == "c:" then
    return {"duplicate", 0, 0, 0, holder}
  end
  if holder ~= hook then
    return {"pending", math.max(1, redis.call("PTTL", ck)), 0, 0, holder}
  end
end
apply()
return {"ok", 0, math.max(remaining, 0), math.ceil(reset / 1000), hook}
