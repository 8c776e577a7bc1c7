local a = ARGV
local slot = a[1]
local now = math.floor(tonumber(a[2]) / 1000)
local nq = tonumber(a[3])
local i = 4
local out = {}
for q = 1, nq do
  local f = a[i]
  local nw = tonumber(a[i + 1]); i = i + 2
  local c = {}
  local r = {redis.call('GET', slot .. ':' .. f .. ':deny')}
  for k = 1, nw do
    r[k + 1] = fg_sum(c, slot, f, now, tonumber(a[i]))
    i = i + 1
  end
  out[q] = r
end
return out
