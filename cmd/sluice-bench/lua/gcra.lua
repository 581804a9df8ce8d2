if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(ARGV[1])
local new = {}
local wait, remaining, reset = 0, -1, 0
for i = 1, n do
  local inc = tonumber(ARGV[2 * i])
  local cap = tonumber(ARGV[2 * i + 1])
  local tat = tonumber(redis.call("GET", KEYS[i]) or now)
  tat = math.max(tat, now)
  local new_tat = tat + inc
  local allow_at = new_tat - cap
  if now < allow_at then
    wait = math.max(wait, allow_at - now)
    reset = math.max(reset, tat - now)
  else
    local rem = math.floor((now - allow_at) / inc)
    if remaining < 0 or rem < remaining then remaining = rem end
    reset = math.max(reset, new_tat - now)
  end
  new[i] = new_tat
end
local function apply()
  for i = 1, n do
    redis.call("SET", KEYS[i], string.format("%d", new[i]),
      "PX", string.format("%d", math.ceil((new[i] - now) / 1000)))
  end
end
