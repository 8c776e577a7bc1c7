-- reply codes (live/offsets.go, resetMoved)
local MOVED, ELSEWHERE = 1, 0

-- KEYS: the offset D, the checkpoint offset C (write-back). The partition
-- resumes from C when it is stored, so that is the one that must stand at
-- ARGV[1]; both move.
local cur = redis.call('GET', KEYS[2]) or redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then return ELSEWHERE end
redis.call('SET', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('SET', KEYS[2], ARGV[2]) end
return MOVED
