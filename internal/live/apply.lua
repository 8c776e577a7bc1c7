-- reply codes: the first value of the reply (live/apply.go, replyApplied...)
local APPLIED, HELD, TRIM, DEDUP_RACED, REWIND, STALE, LOST = 0, 1, 2, 3, 4, 5, 6

local a = ARGV
local offkey = KEYS[1]
local slot = a[1]
local first, last = tonumber(a[2]), tonumber(a[3])
local now_ms, slack = tonumber(a[4]), tonumber(a[5])
local expect, maxlog = tonumber(a[6]), tonumber(a[7])
local keep_ms = tonumber(a[8])
local gseq = tonumber(a[9])
-- write-back (live/writeback.go): the caller's memory holds counts Redis
-- does not, valid only while no one else wrote to the slot: any other
-- offset or change sequence than it expects refuses the whole batch
local fence = a[10] == '1'
local now = math.floor(now_ms / 1000)
local now_us = now_ms * 1000
local prev = redis.call('GET', offkey)
if prev then
  prev = tonumber(prev)
  if last < prev then return {HELD, prev} end
  if first < prev then return {TRIM, prev} end
  if first > prev then return {REWIND, prev} end
elseif expect >= 0 then
  -- the caller applied here before: Redis lost the slot, and what it
  -- held is counted again from the log (aggregator.Recounter)
  return {LOST, -1}
else
  prev = -1
end
local all = prev ~= expect

local i = 11
local rules = {}
local nrules = tonumber(a[i]); i = i + 1
for r = 1, nrules do rules[r] = {a[i], a[i + 1]}; i = i + 2 end

local profiles = {}
local nprof = tonumber(a[i]); i = i + 1
for q = 1, nprof do
  local pr = {maxw = tonumber(a[i]), limits = {}, buckets = {}}
  local nl = tonumber(a[i + 1]); i = i + 2
  for l = 1, nl do
    -- {rule, count, window, shadow, distinct kind or ''}
    pr.limits[l] = {tonumber(a[i]), tonumber(a[i + 1]), tonumber(a[i + 2]), a[i + 3] == '1', a[i + 4]}
    i = i + 5
  end
  local nb = tonumber(a[i]); i = i + 1
  for b = 1, nb do
    -- {rule, interval us, burst, shadow, rate as in the rules file}
    pr.buckets[b] = {tonumber(a[i]), tonumber(a[i + 1]), tonumber(a[i + 2]), a[i + 3] == '1', a[i + 4]}
    i = i + 5
  end
  profiles[q] = pr
end

local nw = tonumber(a[i]); i = i + 1
local w0 = i
i = i + 4 * nw
local partial = a[i] == '1'; i = i + 1
if all and partial then return {STALE, prev} end

local subjects = {}
local anyg = false
local nsub = tonumber(a[i]); i = i + 1
for s = 1, nsub do
  local sub = {f = a[i], prof = profiles[tonumber(a[i + 1])], e = tonumber(a[i + 2]), plan = a[i + 3], seen = {}, bev = {}}
  local nd = tonumber(a[i + 4]); i = i + 5
  for k = 1, nd do
    sub.seen[k] = {a[i], a[i + 1], tonumber(a[i + 2])} -- distinct kind, value, second
    i = i + 3
  end
  local nbe = tonumber(a[i]); i = i + 1
  for k = 1, nbe do
    sub.bev[k] = {tonumber(a[i]), tonumber(a[i + 1])} -- event time us, n (arrival order)
    i = i + 2
  end
  local ng = tonumber(a[i]); i = i + 1
  if ng == 1 then
    local g = {best = {}}
    local nb = tonumber(a[i]); i = i + 1
    for k = 1, nb do
      local l = tonumber(a[i + 1])
      g.best[a[i] == '1' and 'shadow' or 'deny'] = {l = l, lim = sub.prof.limits[l], count = tonumber(a[i + 2]), u_ms = tonumber(a[i + 3]), t = tonumber(a[i + 4])}
      i = i + 5
    end
    g.js, g.x = a[i], tonumber(a[i + 1]); i = i + 2
    sub.g = g
    anyg = true
  end
  subjects[s] = sub
end

local statekey, expkey = slot .. ':@state', slot .. ':@exp'
local logkey, seqkey = slot .. ':@log', slot .. ':@seq'

-- event ids this batch counts (the caller left out those it found counted
-- within the horizon); one counted since it looked means another writer
-- raced this one: nothing is written and the caller looks again
local idkey = slot .. ':@ids'
local horizon = tonumber(a[i]); i = i + 1
local ids = {}
local nids = tonumber(a[i]); i = i + 1
for k = 1, nids do
  ids[k] = a[i]; i = i + 1
  local sc = redis.call('ZSCORE', idkey, ids[k])
  if sc and tonumber(sc) > now - horizon then return {DEDUP_RACED, prev} end
end

local function dkey(sub, kind) return slot .. ':' .. sub.f .. ':d:' .. kind end
local function gkey(sub) return slot .. ':' .. sub.f .. ':g' end

-- a limit's count at second t, and the second it loses excess events
local function fg_count(c, sub, lim, t)
  if lim[5] ~= '' then return fg_dcount(dkey(sub, lim[5]), t - lim[3] + 1, t) end
  return fg_sum(c, slot, sub.f, t, lim[3])
end
local function fg_lim_until(c, sub, lim, t, excess)
  if lim[5] ~= '' then return fg_duntil(dkey(sub, lim[5]), t - lim[3] + 1, t, lim[3], excess) end
  return fg_until(c, slot, sub.f, t, lim[3], excess)
end

-- consider one candidate deny record (until in ms) for a kind
local function fg_best(best, kind, cand)
  if best[kind] == nil or cand.u_ms > best[kind].u_ms then best[kind] = cand end
end

local NOEVAL = 1000000000000000

-- whether the subject's plan evaluates its k-th limit (windows, then buckets)
local function fg_wants(sub, k)
  return sub.plan == '*' or string.byte(sub.plan, k) == 49
end

-- evaluate the planned window limits of one subject at second t into best
-- and near (per limit {count, until s}), and each one's headroom into hl
-- (the least seen)
local function fg_eval(c, sub, t, best, near, hl)
  for l, lim in ipairs(sub.prof.limits) do
    if fg_wants(sub, l) then
      local L = lim[2]
      local count = fg_count(c, sub, lim, t)
      local thr = math.floor((L + 1) / 2)
      hl[l] = math.min(hl[l] or NOEVAL, thr - count)
      if count >= thr then
        local u = 0
        if count >= L then u = fg_lim_until(c, sub, lim, t, count + 1 - L) end
        local nr = near[l]
        if nr == nil then near[l] = {count, u}
        else nr[1] = math.max(nr[1], count); nr[2] = math.max(nr[2], u) end
      end
      if count > L then
        local u = fg_lim_until(c, sub, lim, t, count - L)
        fg_best(best, lim[4] and 'shadow' or 'deny', {l = l, lim = lim, count = count, u_ms = u * 1000, t = t})
      end
    end
  end
end

-- evaluate one subject's planned buckets at now from their arrival times
-- (tats): near when half the burst is used; over (a deny record) when the
-- bucket is overdrawn; each one's headroom in events into hl
local function fg_eval_buckets(sub, tats, best, bnear, hl)
  local nl = #sub.prof.limits
  for b, bk in ipairs(sub.prof.buckets) do
    if fg_wants(sub, nl + b) then
      local T, burst = bk[2], bk[3]
      local dvt = T * burst
      local tat = tats[b] or 0
      local used = math.max(tat - now_us, 0)
      hl[nl + b] = math.floor((dvt / 2 - used) / T)
      -- near at half the burst, and always when the next event would not
      -- conform (a burst of 1 blocks before it is half used)
      if used * 2 >= dvt or tat + T - dvt > now_us then bnear[b] = tat end
      if tat - dvt > now_us then
        local overdrawn = math.ceil((tat - dvt - now_us) / T)
        fg_best(best, bk[4] and 'shadow' or 'deny', {b = b, bk = bk, count = burst + overdrawn, u_ms = math.ceil((tat - dvt) / 1000), t = now})
      end
    end
  end
end

-- Phase 1: every write that counts (increments, distinct values, bucket
-- arrival times) and every read, each write recorded; a failing call
-- (WRONGTYPE on a foreign key) undoes them all and fails the run.
local undo = {}
local evals = {}
local seq0
local stale = false
local err = fg_guard(undo, function()
  redis.call('HLEN', statekey)
  redis.call('ZCARD', expkey)
  redis.call('XLEN', logkey)
  redis.call('ZCARD', idkey)
  seq0 = tonumber(redis.call('GET', seqkey) or '0')
  if seq0 == nil then error({err = 'change sequence ' .. seqkey .. ' is not an integer'}) end
  -- the caller's verdicts rest on a copy of the buckets as it left them
  if (anyg or fence) and (all or seq0 ~= gseq) then stale = true return end
  local wu = {'w', a, w0, 0}
  undo[#undo + 1] = wu
  for k = w0, w0 + 4 * (nw - 1), 4 do
    local key = a[k]
    if redis.call('HINCRBY', key, a[k + 1], a[k + 2]) == tonumber(a[k + 2]) then redis.call('EXPIRE', key, a[k + 3]) end
    wu[4] = wu[4] + 1
  end
  for s = 1, nsub do
    local sub = subjects[s]
    for _, v in ipairs(sub.seen) do fg_zseen(dkey(sub, v[1]), v[2], v[3], undo) end
    sub.tats = {}
    if #sub.prof.buckets > 0 then
      local key = gkey(sub)
      for b, bk in ipairs(sub.prof.buckets) do
        local name = rules[bk[1]][1]
        local tat = tonumber(redis.call('HGET', key, name) or '0')
        for _, e in ipairs(sub.bev) do tat = math.max(tat, e[1]) + e[2] * bk[2] end
        if #sub.bev > 0 then fg_hset(key, name, string.format('%d', tat), undo) end
        sub.tats[b] = tat
      end
    end
  end
  for s = 1, nsub do
    local sub = subjects[s]
    if sub.g then
      local recs = {}
      for kind, _ in pairs(sub.g.best) do recs[kind] = redis.call('GET', slot .. ':' .. sub.f .. ':' .. kind) end
      evals[#evals + 1] = {s = s, best = sub.g.best, js = sub.g.js, x = sub.g.x, recs = recs, old = redis.call('HGET', statekey, sub.f)}
    end
    if all then sub.plan = '*' end
    if sub.plan ~= '' and not sub.g then
      local c, best, near, bnear, hl = {}, {}, {}, {}, {}
      fg_eval(c, sub, sub.e, best, near, hl)
      if sub.e > now then
        -- a window shorter than the skew evaluated only at the future second
        -- would miss the batch's events of now
        fg_eval(c, sub, now, best, near, hl)
      end
      fg_eval_buckets(sub, sub.tats, best, bnear, hl)
      local h = {}
      for k = 1, #sub.prof.limits + #sub.prof.buckets do h[k] = hl[k] or NOEVAL end
      local recs = {}
      for kind, b in pairs(best) do recs[kind] = redis.call('GET', slot .. ':' .. sub.f .. ':' .. kind) end
      evals[#evals + 1] = {s = s, best = best, near = near, bnear = bnear, h = h, recs = recs, old = redis.call('HGET', statekey, sub.f)}
    end
  end
end)
if err then return err end
if stale then return {STALE, prev} end

-- Phase 2: writes that cannot fail on the types checked above.
if horizon > 0 then
  for _, id in ipairs(ids) do redis.call('ZADD', idkey, now, id) end
  redis.call('ZREMRANGEBYSCORE', idkey, '-inf', now - horizon)
end
for s = 1, nsub do
  local sub = subjects[s]
  local kinds = {}
  for _, v in ipairs(sub.seen) do kinds[v[1]] = true end
  for kind, _ in pairs(kinds) do
    -- what no window can read any more, and the oldest past the cap
    local key = dkey(sub, kind)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - sub.prof.maxw)
    redis.call('ZREMRANGEBYRANK', key, 0, -(MAXDISTINCT + 1))
    redis.call('EXPIRE', key, sub.prof.maxw + slack)
  end
  if #sub.bev > 0 then
    local ttl = slack
    for _, tat in pairs(sub.tats) do ttl = math.max(ttl, math.ceil((tat - now_us) / 1000000) + slack) end
    redis.call('EXPIRE', gkey(sub), ttl)
  end
end

local out = {APPLIED, prev, all and 1 or 0}
local decs, hs, changes, djson, exts = {}, {}, {}, {}, {}
for _, ev in ipairs(evals) do
  local sub = subjects[ev.s]
  for kind, b in pairs(ev.best) do
    local rule, L, wfmt, bucket, index
    if b.lim then
      rule, L, wfmt, bucket, index = rules[b.lim[1]], b.lim[2], fg_fmt_window(b.lim[3]), '', b.l
    else
      rule, L, wfmt, index = rules[b.bk[1]], b.bk[3], '', #sub.prof.limits + b.b
      bucket = ',"bucket":{"rate":' .. cjson.encode(b.bk[5]) .. ',"burst":' .. string.format('%d', b.bk[3]) .. '}'
    end
    local u_ms = b.u_ms
    local old = ev.recs[kind]
    local write, new, since = true, true, b.t * 1000
    if old then
      local ok, o = pcall(cjson.decode, old)
      -- a record whose until has passed is no record, whether or not the
      -- server has dropped it yet (its clock is not the script's)
      if ok and type(o) == 'table' and tonumber(o['until']) and tonumber(o['until']) > now_ms then
        if tonumber(o['until']) >= u_ms then write = false end
        new = write and (o['rule'] ~= rule[1] or o['window'] ~= wfmt)
        -- an extended record keeps the time of the decision that made it
        if not new and tonumber(o['since']) then since = tonumber(o['since']) end
      end
    end
    if write and u_ms > now_ms then
      local rec = fg_deny_json(rule[1], L, b.lim and b.lim[3], b.count, u_ms, rule[2], since)
      if bucket ~= '' then rec = string.sub(rec, 1, -2) .. bucket .. '}' end
      redis.call('SET', slot .. ':' .. sub.f .. ':' .. kind, rec, 'PX', u_ms - now_ms + keep_ms)
      local shadow = kind == 'shadow'
      -- an extension is reported too (a replay measures how long a subject
      -- stays denied), but only a new decision enters the change stream
      local list = new and decs or exts
      for _, x in ipairs({ev.s, index, b.count, u_ms, shadow and 1 or 0, b.t}) do list[#list + 1] = x end
      if new then
        djson[#djson + 1] = '{"f":' .. cjson.encode(sub.f) .. ',"rule":' .. cjson.encode(rule[1]) ..
          ',"limit":' .. string.format('%d', L) .. ',"window":"' .. wfmt ..
          '","count":' .. string.format('%d', b.count) .. ',"until":' .. string.format('%d', u_ms) ..
          ',"shadow":' .. tostring(shadow) .. ',"message":' .. cjson.encode(rule[2]) ..
          ',"ts":' .. string.format('%d', b.t * 1000) .. bucket .. '}'
      end
    end
  end
  -- state: the near limits and buckets in profile order, as the limiter
  -- reads them
  -- (a verdict brings it built: js, '' for none, and its expiry x)
  local js, x = ev.js, ev.x
  if js == nil then
    local parts, bparts, t = {}, {}, math.max(sub.e, now)
    x = 0
    for l, lim in ipairs(sub.prof.limits) do
      local nr = ev.near[l]
      if nr then
        parts[#parts + 1] = '[' .. cjson.encode(rules[lim[1]][1]) .. ',' .. string.format('%d,%d,%d,%d', lim[2], lim[3], nr[1], nr[2]) .. ']'
        x = math.max(x, nr[2], t + lim[3])
      end
    end
    for b, bk in ipairs(sub.prof.buckets) do
      local tat = ev.bnear[b]
      if tat then
        bparts[#bparts + 1] = '[' .. cjson.encode(rules[bk[1]][1]) .. ',' .. string.format('%d', tat) .. ']'
        x = math.max(x, math.ceil(tat / 1000000))
      end
    end
    js = ''
    if #parts > 0 or #bparts > 0 then
      js = '{"t":' .. string.format('%d', t) .. ',"l":[' .. table.concat(parts, ',') .. ']'
      if #bparts > 0 then js = js .. ',"b":[' .. table.concat(bparts, ',') .. ']' end
      js = js .. '}'
    end
  end
  fg_state(statekey, expkey, sub.f, js, ev.old, x, changes)
  -- (the caller knows a verdict's headroom)
  if ev.h then
    hs[#hs + 1] = ev.s
    for _, x in ipairs(ev.h) do hs[#hs + 1] = x end
  end
end
out[4] = decs
out[5] = hs

fg_prune_states(statekey, expkey, now)
redis.call('SET', offkey, string.format('%d', last + 1))

local seq = 0
if #changes > 0 or #djson > 0 then
  seq = seq0 + 1
  redis.call('SET', seqkey, seq)
  local xa = {'XADD', logkey, 'MAXLEN', '~', maxlog, '*', 'q', seq, 'o', last + 1}
  if #changes > 0 then xa[#xa + 1] = 's'; xa[#xa + 1] = '[' .. table.concat(changes, ',') .. ']' end
  if #djson > 0 then xa[#xa + 1] = 'd'; xa[#xa + 1] = '[' .. table.concat(djson, ',') .. ']' end
  redis.call(unpack(xa))
end
out[6] = seq
out[7] = exts
out[8] = seq > 0 and seq or seq0
return out
