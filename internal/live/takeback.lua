-- Takes back take stream entries an owner appended at ids that came again
-- (live/ownerloss.go): after its stream went back, the take relay may
-- already be past them, going on from what it published, and would never
-- publish them. An entry in a produce request the relay's cursor notes
-- (past its last, up to its pending) stays: the request, or the read-back
-- of it, decides; the owner settles it later. Any other is deleted, and
-- the refunds counter moved so that a relay that read it notes no request
-- with it; the owner appends its events again at the new epoch. One the
-- relay published is counted by the time the owner decides (the partition's
-- end is read after this), so its events are not appended again.
-- KEYS: the take stream, the relay's cursor, the refunds counter.
-- ARGV: entry ids.
-- Reply: the entries kept, in a noted request; the others are no longer in
-- the stream.

-- stream ids "<ms>-<seq>" in order, as numbers
local function id_lt(x, y)
  local xm, xs = string.match(x, '^(%d+)-(%d+)$')
  local ym, ys = string.match(y, '^(%d+)-(%d+)$')
  if not xm or not ym then return false end
  xm, xs, ym, ys = tonumber(xm), tonumber(xs), tonumber(ym), tonumber(ys)
  return xm < ym or (xm == ym and xs < ys)
end

-- the cursor: "[@<owner>] <last> [<pending> <offset> <ms>]"
local last, pending = nil, nil
local cur = redis.call('GET', KEYS[2])
if cur then
  local f = {}
  for w in string.gmatch(cur, '%S+') do
    if string.sub(w, 1, 1) ~= '@' then f[#f + 1] = w end
  end
  last, pending = f[1], f[2]
end

local kept, deleted = {}, 0
for _, id in ipairs(ARGV) do
  if pending and id_lt(last, id) and not id_lt(pending, id) then
    kept[#kept + 1] = id
  elseif redis.call('XDEL', KEYS[1], id) > 0 then
    deleted = deleted + 1
  end
end
if deleted > 0 then redis.call('INCR', KEYS[3]) end
return kept
