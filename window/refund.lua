local a = ARGV
local slot = a[1]
local now = math.floor(tonumber(a[2]) / 1000)
local slack, n = tonumber(a[3]), tonumber(a[4])
local i = 6
for s = 1, tonumber(a[5]) do
  local f = a[i]
  fg_incr(nil, slot, f, {[now] = -n}, tonumber(a[i + 1]), now, slack, nil)
  local nb = tonumber(a[i + 2]); i = i + 3
  for b = 1, nb do
    local key, name, T = slot .. ':' .. f .. ':g', a[i], tonumber(a[i + 1])
    local tat = tonumber(redis.call('HGET', key, name) or '0')
    if tat > 0 then redis.call('HSET', key, name, string.format('%d', tat - n * T)) end
    i = i + 2
  end
end
return 1
