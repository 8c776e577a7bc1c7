-- One part of a write-back checkpoint too large for one script run
-- (live/writeback.go, checkpointParts): the increments of some of the
-- owner's subjects, written now so that no single run holds Redis for
-- long, while C stays where it is until the last part (checkpoint.lua)
-- moves it. The part marks its subjects with the offset their increments
-- run to: a replay from C (a crash before the last part) skips their
-- records before it, which Redis holds already. It also moves D up to that
-- offset, as checkpoint.lua does, so that every marked record is one a
-- replay counts only.
-- KEYS: C, D, the change sequence, the marks (a hash: '<offset>/<part>' ->
-- JSON array of the subjects' fields).
-- ARGV: expected C ('' for none stored), the offset the increments run to,
-- expected change sequence, expected D (-1 for none stored), the part's
-- mark field, its JSON, n, then n times {bucket key, field, increment, ttl}.

local WRITTEN = 0

local a = ARGV
local fenced, d = fg_ckpt_fenced(KEYS, a[1], a[3], a[4])
if fenced then return fenced end
local to = tonumber(a[2])
redis.call('HLEN', KEYS[4]) -- a key of another type fails before any write

local failed = fg_ckpt_fields(a, 8, tonumber(a[7]))
if failed then return failed end

redis.call('HSET', KEYS[4], a[5], a[6])
if d < to then redis.call('SET', KEYS[2], string.format('%d', to)) end
return {WRITTEN}
