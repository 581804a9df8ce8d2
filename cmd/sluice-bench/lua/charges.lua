if wait > 0 then
  return {"rate_limited", math.max(1, math.ceil(wait / 1000)), 0, math.ceil(reset / 1000)}
end
apply()
return {"ok", 0, math.max(remaining, 0), math.ceil(reset / 1000)}
