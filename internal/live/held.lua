-- The verdicts a write-back owner holds back past its checkpoint
-- (live/carried.go): written before the checkpoint's runs move D past the
-- batches they came from, compare-and-set as a checkpoint is.
-- KEYS: C, D, the change sequence (fg_ckpt_fenced's), the held verdicts.
-- ARGV: expected C ('' for none stored), expected change sequence,
-- expected D (-1 for none stored), their JSON ('' for none).

local WRITTEN = 0

local fenced = fg_ckpt_fenced(KEYS, ARGV[1], ARGV[2], ARGV[3])
if fenced then return fenced end
if ARGV[4] == '' then
  redis.call('DEL', KEYS[4])
else
  redis.call('SET', KEYS[4], ARGV[4])
end
return {WRITTEN}
