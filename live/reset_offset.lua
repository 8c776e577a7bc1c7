-- reply codes (live/offsets.go, resetMoved)
local MOVED, ELSEWHERE = 1, 0

local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then return ELSEWHERE end
redis.call('SET', KEYS[1], ARGV[2])
return MOVED
