-- Shared by checkpoint.lua and checkpoint_part.lua (live/writeback.go).

-- fg_ckpt_fields raises n bucket fields, given from ARGV[from] on as
-- {bucket key, field, increment, ttl}; a key is given a positive ttl when
-- the field is new, -ttl for a negative one, and keeps its expiry for 0
-- (live/writeback.go, ckptTTL). A failing write (WRONGTYPE on a foreign
-- key) undoes the ones before it and returns the error reply; nil when all
-- were written.
local function fg_ckpt_fields(a, from, n)
  local last = from + 4 * (n - 1)
  for k = from, last, 4 do
    local key = a[k]
    -- the increment as sent: Redis parses it, Lua need not
    local v = redis.pcall('HINCRBY', key, a[k + 1], a[k + 2])
    if type(v) == 'table' then
      -- every field before this one was written: undo them, last first
      for j = k - 4, from, -4 do
        redis.call('HINCRBY', a[j], a[j + 1], -tonumber(a[j + 2]))
      end
      return redis.error_reply('floodgate checkpoint: ' .. key .. ': ' .. tostring(v.err))
    end
    local ttl = a[k + 3]
    if ttl ~= '0' then
      ttl = tonumber(ttl)
      if ttl < 0 then
        redis.call('EXPIRE', key, -ttl)
      elseif v == tonumber(a[k + 2]) then
        redis.call('EXPIRE', key, ttl)
      end
    end
  end
  return nil
end

-- fg_ckpt_fenced tells whether the slot is not as the owner's memory is
-- as of: C (KEYS[1]; '' for none stored), the change sequence (KEYS[3]) or
-- D (KEYS[2]; -1 for none) moved. D too: a failover that lost decisions
-- written after C (deny extensions move D and not the sequence) must send
-- the owner back to decide again. Returns the reply to give (nil when
-- not fenced), and D.
local function fg_ckpt_fenced(keys, expect_c, expect_seq, expect_d)
  local cur = redis.call('GET', keys[1]) or ''
  local seq = redis.call('GET', keys[3]) or '0'
  local d = tonumber(redis.call('GET', keys[2]) or '-1') or -1
  if cur ~= expect_c or tonumber(seq) ~= tonumber(expect_seq) or d ~= tonumber(expect_d) then
    return {1, cur, seq, d}, d -- FENCED
  end
  return nil, d
end
