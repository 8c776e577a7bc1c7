-- A write-back owner's checkpoint (live/writeback.go): the bucket
-- increments it counted since its last checkpoint, and the checkpoint
-- offset C moved to the last record counted, atomically; refused when the
-- slot is not as the owner's memory is as of.
-- KEYS: C, D (the decisions offset), the change sequence, reset boundaries,
-- the rules text kept with C, the event ids counted (dedup), the marks of
-- parts (checkpoint_part.lua).
-- ARGV: expected C ('' for none stored), new C, expected change sequence,
-- expected D (-1 for none stored), the rules the records after the new C
-- are counted under ('' when the slot holds them already), n, then n times
-- {bucket key, field, increment, ttl}, then the dedup horizon in seconds
-- (0: off), now (second), m, then m times {event id, second counted at}.

-- reply codes (live/writeback.go, checkpointWritten); FENCED is
-- fg_ckpt_fenced's
local WRITTEN = 0

local a = ARGV
local fenced, d = fg_ckpt_fenced(KEYS, a[1], a[3], a[4])
if fenced then return fenced end
local newc = tonumber(a[2])

-- the ids and the marks first: a key of another type fails here, before
-- any write
local n = tonumber(a[6])
local at = 7 + 4 * n
local horizon, now, m = tonumber(a[at]), tonumber(a[at + 1]), tonumber(a[at + 2])
if horizon > 0 then
  redis.call('ZCARD', KEYS[6])
end
redis.call('HLEN', KEYS[7])

local failed = fg_ckpt_fields(a, 7, n)
if failed then return failed end

for i = at + 3, at + 1 + 2 * m, 2000 do
  local za = {'ZADD', KEYS[6]}
  for k = i, math.min(i + 1998, at + 1 + 2 * m), 2 do
    za[#za + 1] = a[k + 1]
    za[#za + 1] = a[k]
  end
  redis.call(unpack(za))
end
if horizon > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - horizon) end

redis.call('SET', KEYS[1], string.format('%d', newc))
if a[5] ~= '' then redis.call('SET', KEYS[5], a[5]) end
-- every decision before C is written: a batch deciding nothing skips the
-- apply script, so D catches up here
if d < newc then redis.call('SET', KEYS[2], string.format('%d', newc)) end
-- reset boundaries a replay from C can no longer cross
local rs = redis.call('HGETALL', KEYS[4])
for i = 1, #rs, 2 do
  if (tonumber(rs[i + 1]) or 0) <= newc then redis.call('HDEL', KEYS[4], rs[i]) end
end
-- the marks of parts written before C (this checkpoint's, or a failed
-- one's): a replay from the new C no longer crosses them
local ms = redis.call('HKEYS', KEYS[7])
for _, f in ipairs(ms) do
  if (tonumber(string.match(f, '^(%d+)/')) or 0) <= newc then redis.call('HDEL', KEYS[7], f) end
end
return {WRITTEN}
