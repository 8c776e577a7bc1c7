local out = {}
for i = 1, #ARGV, 1000 do
  local part = redis.call('ZMSCORE', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  for k = 1, #part do out[#out + 1] = part[k] end
end
return out
