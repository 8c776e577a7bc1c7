-- reply codes (window/read.go, refunded)
local REFUNDED, KEPT = 1, 0

local a = ARGV
local slot = a[1]
local now = math.floor(tonumber(a[2]) / 1000)
local slack, n = tonumber(a[3]), tonumber(a[4])
local entry = a[5]

-- stream ids "<ms>-<seq>" in order, as numbers
local function id_le(x, y)
  local xm, xs = string.match(x, '^(%d+)-(%d+)$')
  local ym, ys = string.match(y, '^(%d+)-(%d+)$')
  if not xm or not ym then return false end
  xm, xs, ym, ys = tonumber(xm), tonumber(xs), tonumber(ym), tonumber(ys)
  return xm < ym or (xm == ym and xs <= ys)
end

-- The take's events are taken back with its count, or neither is: once the
-- relay has them (published, or in a request it noted), the reservation
-- stays counted as the events are.
if entry ~= '' then
  if #redis.call('XRANGE', KEYS[2], entry, entry) == 0 then return KEPT end
  local cur = redis.call('GET', KEYS[3])
  if cur then
    for f in string.gmatch(cur, '%S+') do
      if string.sub(f, 1, 1) ~= '@' and id_le(entry, f) then return KEPT end
    end
  end
  redis.call('XDEL', KEYS[2], entry)
  -- a relay that read the entry before this notes no request with it
  redis.call('INCR', KEYS[4])
end

local i = 7
for s = 1, tonumber(a[6]) do
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
return REFUNDED
