-- Fences a partition's take stream for a new owner (live/ownergate.go):
-- the stream's last id moves to <epoch>-0, the epoch past every id the
-- stream ever generated, and the new owner appends its takes at
-- <epoch>-*. A zombie (a former owner that has not noticed it lost the
-- partition) appends at its own, smaller epoch, which Redis refuses: so
-- every take it answered is in the stream before this run, where the new
-- owner's load finds it, and none after. Plain XADDs, no script per take.
-- KEYS: the take stream.
-- Reply: the epoch.

local t = redis.call('TIME')
local epoch = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      local ms = tonumber(string.match(info[i + 1], '^(%d+)-'))
      if ms >= epoch then epoch = ms + 1 end
    end
  end
end
local id = string.format('%d-0', epoch)
if redis.call('EXISTS', KEYS[1]) == 1 then
  -- no entry: a deleted one would stay in its node, and the relay's
  -- approximate trim leaves a node it cannot drop whole
  redis.call('XSETID', KEYS[1], id)
else
  -- a stream of one entry, deleted: the node goes, the last id stays
  redis.call('XADD', KEYS[1], id, 'fence', '1')
  redis.call('XDEL', KEYS[1], id)
end
return epoch
