local function fg_key(slot, f, level, n)
  return slot .. ':' .. f .. ':' .. level .. ':' .. string.format('%d', n)
end

local function fg_hash(c, key)
  local t = c[key]
  if t == nil then
    t = {}
    local flat = redis.call('HGETALL', key)
    for i = 1, #flat, 2 do t[tonumber(flat[i])] = tonumber(flat[i + 1]) end
    c[key] = t
  end
  return t
end

-- units a..b of a level (seconds, minutes or hours by number) as segments
-- of its hashes, each hash holding per units (60 seconds of a minute, 60
-- minutes of an hour, 24 hours of a day)
local function fg_segs(out, level, per, a, b)
  while a <= b do
    local n = math.floor(a / per)
    local e = math.min(b, n * per + per - 1)
    out[#out + 1] = {level, n, a - n * per, e - n * per}
    a = e + 1
  end
end

-- seconds a..b with whole minutes in the middle when useM
local function fg_segs_sm(out, a, b, useM)
  if a > b then return end
  local m1 = math.ceil(a / 60)
  local m2 = math.floor((b + 1) / 60) - 1
  if not useM or m1 > m2 then fg_segs(out, 's', 60, a, b) return end
  fg_segs(out, 's', 60, a, m1 * 60 - 1)
  fg_segs(out, 'm', 60, m1, m2)
  fg_segs(out, 's', 60, (m2 + 1) * 60, b)
end

local function fg_split(a, b, w)
  local out = {}
  if w <= 3600 then fg_segs_sm(out, a, b, w > 60) return out end
  local h1 = math.ceil(a / 3600)
  local h2 = math.floor((b + 1) / 3600) - 1
  if h1 > h2 then fg_segs_sm(out, a, b, true) return out end
  fg_segs_sm(out, a, h1 * 3600 - 1, true)
  fg_segs(out, 'h', 24, h1, h2)
  fg_segs_sm(out, (h2 + 1) * 3600, b, true)
  return out
end

local function fg_seg_sum(c, slot, f, seg)
  local t = fg_hash(c, fg_key(slot, f, seg[1], seg[2]))
  local s = 0
  for k, v in pairs(t) do
    if k >= seg[3] and k <= seg[4] then s = s + v end
  end
  return s
end

local function fg_sum(c, slot, f, now, w)
  local segs = fg_split(now - w + 1, now, w)
  local s = 0
  for i = 1, #segs do s = s + fg_seg_sum(c, slot, f, segs[i]) end
  return s
end

-- fg_walk goes through a segment's buckets in time order until need events
-- were seen; it returns the events seen and the second of the event that
-- completes need (drilling hours -> minutes -> seconds), or nil.
local fg_walk
fg_walk = function(c, slot, f, seg, need)
  local t = fg_hash(c, fg_key(slot, f, seg[1], seg[2]))
  local fs = {}
  for k, _ in pairs(t) do
    if k >= seg[3] and k <= seg[4] then fs[#fs + 1] = k end
  end
  table.sort(fs)
  local got = 0
  for _, k in ipairs(fs) do
    local v = t[k]
    if got + v >= need then
      if seg[1] == 's' then return got + v, seg[2] * 60 + k end
      local sub, last
      if seg[1] == 'm' then
        local m = seg[2] * 60 + k
        sub, last = {'s', m, 0, 59}, m * 60 + 59
      else
        local h = seg[2] * 24 + k
        sub, last = {'m', h, 0, 59}, h * 3600 + 3599
      end
      local _, sec = fg_walk(c, slot, f, sub, need - got)
      -- A missing finer level (rules changed, keys evicted) falls back to
      -- the end of the coarse bucket: late, never early.
      return got + v, sec or last
    end
    got = got + v
  end
  return got, nil
end

local function fg_until(c, slot, f, now, w, excess, ahead)
  local segs = fg_split(now - w + 1, now, w)
  if ahead and ahead > 0 then fg_segs(segs, 's', 60, now + 1, now + ahead) end
  local need = excess
  for i = 1, #segs do
    local got, sec = fg_walk(c, slot, f, segs[i], need)
    if sec then return sec + w end
    need = need - got
  end
  return now + w
end

-- fg_hincr adds n to a bucket field and, when undo is a table, records how
-- to take it back: Redis does not roll a failed script back, so a script
-- that may fail after writing undoes its own writes (fg_undo) before it
-- reports the error, and a retry never counts twice.
local function fg_hincr(c, key, field, n, ttl, undo)
  local created = redis.call('HINCRBY', key, field, n) == n
  if created then
    if ttl < 1 then ttl = 1 end
    redis.call('EXPIRE', key, ttl)
  end
  if undo then undo[#undo + 1] = {'h', key, field, n, created} end
  local t = c and c[key]
  if t then t[field] = (t[field] or 0) + n end
end

-- fg_zseen records that value was seen at second sec in a distinct set
-- (score: the last second it was seen), recording the undo.
local function fg_zseen(key, value, sec, undo)
  local old = redis.call('ZSCORE', key, value)
  if old and tonumber(old) >= sec then return end
  redis.call('ZADD', key, sec, value)
  if undo then undo[#undo + 1] = {'z', key, value, old} end
end

-- fg_hset sets a hash field (a bucket's theoretical arrival time),
-- recording the undo.
local function fg_hset(key, field, value, undo)
  local old = redis.call('HGET', key, field)
  redis.call('HSET', key, field, value)
  if undo then undo[#undo + 1] = {'s', key, field, old} end
end

local function fg_undo(undo)
  for i = #undo, 1, -1 do
    local u = undo[i]
    if u[1] == 'h' then
      if u[5] then redis.call('HDEL', u[2], u[3]) else redis.call('HINCRBY', u[2], u[3], -u[4]) end
    elseif u[1] == 'w' then
      -- {'w', args, first, done}: done increments {key, field, n, ttl} from
      -- args[first] on; a field back at 0 was created by them
      local a = u[2]
      for k = u[3] + 4 * (u[4] - 1), u[3], -4 do
        if redis.call('HINCRBY', a[k], a[k + 1], -tonumber(a[k + 2])) == 0 then redis.call('HDEL', a[k], a[k + 1]) end
      end
    elseif u[1] == 'z' then
      if u[4] then redis.call('ZADD', u[2], u[4], u[3]) else redis.call('ZREM', u[2], u[3]) end
    else
      if u[4] then redis.call('HSET', u[2], u[3], u[4]) else redis.call('HDEL', u[2], u[3]) end
    end
  end
end

-- distinct values of a subject's distinct set whose last second lies in
-- [a, b], and the second from which the set holds excess fewer of them
local function fg_dcount(key, a, b)
  return redis.call('ZCOUNT', key, a, b)
end

local function fg_duntil(key, a, b, w, excess)
  local r = redis.call('ZRANGEBYSCORE', key, a, b, 'WITHSCORES', 'LIMIT', excess - 1, 1)
  if #r == 2 then return tonumber(r[2]) + w end
  return b + w
end

-- fg_guard runs fn; if a Redis call in it fails (a foreign key of another
-- type under the prefix: WRONGTYPE), it undoes the writes fn recorded in
-- undo and raises the error, so nothing of the run stays.
local function fg_guard(undo, fn)
  local ok, err = pcall(fn)
  if not ok then
    fg_undo(undo)
    local msg = type(err) == 'table' and (err.err or err.message) or tostring(err)
    return redis.error_reply('floodgate: nothing written: ' .. tostring(msg))
  end
  return nil
end

local function fg_incr(c, slot, f, incs, maxw, now, slack, undo)
  local ms, hs = {}, {}
  for sec, n in pairs(incs) do
    local m = math.floor(sec / 60)
    fg_hincr(c, fg_key(slot, f, 's', m), sec - m * 60, n, (m + 1) * 60 + maxw + slack - now, undo)
    if maxw > 60 then ms[m] = (ms[m] or 0) + n end
    if maxw > 3600 then
      local h = math.floor(sec / 3600)
      hs[h] = (hs[h] or 0) + n
    end
  end
  for m, n in pairs(ms) do
    local h = math.floor(m / 60)
    fg_hincr(c, fg_key(slot, f, 'm', h), m - h * 60, n, (h + 1) * 3600 + maxw + slack - now, undo)
  end
  for h, n in pairs(hs) do
    local d = math.floor(h / 24)
    fg_hincr(c, fg_key(slot, f, 'h', d), h - d * 24, n, (d + 1) * 86400 + maxw + slack - now, undo)
  end
end

local function fg_fmt_window(w)
  if w % 86400 == 0 then return string.format('%dd', w / 86400) end
  if w % 3600 == 0 then return string.format('%dh', w / 3600) end
  if w % 60 == 0 then return string.format('%dm', w / 60) end
  return string.format('%ds', w)
end

local function fg_deny_json(rule, limit, w, count, until_ms, message, since_ms)
  local wf = ''
  if w and w > 0 then wf = fg_fmt_window(w) end
  return '{"rule":' .. cjson.encode(rule) ..
    ',"limit":' .. string.format('%d', limit) ..
    ',"window":"' .. wf ..
    '","count":' .. string.format('%d', count) ..
    ',"until":' .. string.format('%d', until_ms) ..
    ',"message":' .. cjson.encode(message) ..
    ',"since":' .. string.format('%d', since_ms) .. '}'
end

-- fg_state writes a subject's state as a batch found it (js '' for none:
-- near no limit) over old, the one stored, and appends the change entry
-- part to changes when it differs; x is the second it stops saying anything.
-- fj is f as JSON when the caller has it (cjson.encode(f) otherwise).
local function fg_state(statekey, expkey, f, js, old, x, changes, fj)
  if js ~= '' then
    if js ~= old then
      redis.call('HSET', statekey, f, js)
      redis.call('ZADD', expkey, x, f)
      changes[#changes + 1] = '[' .. (fj or cjson.encode(f)) .. ',' .. js .. ']'
    end
  elseif old then
    redis.call('HDEL', statekey, f)
    redis.call('ZREM', expkey, f)
    changes[#changes + 1] = '[' .. (fj or cjson.encode(f)) .. ',null]'
  end
end

-- fg_prune_states drops states that no longer say anything at second now:
-- bounded work per run; the limiter drops them at the same second on its own.
local function fg_prune_states(statekey, expkey, now)
  local gone = redis.call('ZRANGEBYSCORE', expkey, '-inf', now, 'LIMIT', 0, 64)
  if #gone > 0 then
    redis.call('HDEL', statekey, unpack(gone))
    redis.call('ZREM', expkey, unpack(gone))
  end
end
