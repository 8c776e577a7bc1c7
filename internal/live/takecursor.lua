-- The take relay's cursor (live/takerelay.go), moved by compare-and-set:
-- a relay writes only over the value it last wrote or read, so of two
-- relays of one partition the one whose value was overwritten learns it
-- before its next produce request and stops.
-- KEYS: the cursor, the take stream, the refunds counter (same slot).
-- ARGV: the value expected ('' for none), the new value, '1' to append the
-- server's time in ms to it (when a produce request is noted), '' or the
-- least stream id to keep (the entries before it are published), and
-- when a request is noted the refunds counter as it was before the relay
-- read the request's entries: a strict take's refund that deleted one
-- since (window/refund.lua) moved it, and then nothing is noted.
-- Reply: {MOVED, value written, now ms}, {FENCED, value found, now ms} or
-- {CHANGED, value found, now ms}.

-- reply codes (live/takerelay.go, cursorMoved)
local MOVED, FENCED, CHANGED = 0, 1, 2

local t = redis.call('TIME')
local now = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))
local cur = redis.call('GET', KEYS[1]) or ''
if cur ~= ARGV[1] then return {FENCED, cur, now} end
if ARGV[5] and (redis.call('GET', KEYS[3]) or '0') ~= ARGV[5] then return {CHANGED, cur, now} end
local v = ARGV[2]
if ARGV[3] == '1' then v = v .. ' ' .. now end
redis.call('SET', KEYS[1], v)
if ARGV[4] ~= '' then redis.call('XTRIM', KEYS[2], 'MINID', '~', ARGV[4]) end
return {MOVED, v, now}
