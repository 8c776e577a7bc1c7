-- reply codes (live/offsets.go, resetMoved)
local MOVED, ELSEWHERE = 1, 0

-- KEYS: the offset D, the checkpoint offset C (write-back), the marks of
-- a checkpoint's parts. The partition resumes from C when it is stored, so
-- that is the one that must stand at ARGV[1]. D moves and C goes: whoever
-- applies from here (a rebuild writes every count through) leaves
-- everything before D in Redis, and a write-back owner takes C = D from
-- that (live/writeback.go). The marks go too: their offsets are of the log
-- before the move, and would make a replay skip records of the new one.
local cur = redis.call('GET', KEYS[2]) or redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then return ELSEWHERE end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3])
return MOVED
