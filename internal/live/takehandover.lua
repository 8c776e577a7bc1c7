-- Hands the take events Redis lost, and the owner leaving the partition
-- has not appended again, over to its next owner (live/ownerloss.go):
-- into the hand-over hash, unless a newer owner fenced the stream since
-- (its epoch past this owner's), whose load would not see them.
-- KEYS: the take stream, the hand-over hash.
-- ARGV: the leaving owner's epoch, then event id, '<since ms> <entry>' pairs.
-- Reply: the events handed over, or -1 when a newer owner fenced.

local epoch = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      local ms = tonumber(string.match(info[i + 1], '^(%d+)-'))
      if ms > epoch then return -1 end
    end
  end
end
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
return (#ARGV - 1) / 2
