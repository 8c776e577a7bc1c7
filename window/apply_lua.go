package window

// applyBody applies one batch of one partition: the offset check, every
// increment, the evaluation of the subjects the caller asks for, their
// deny records and state, the change entry and the new offset, in one
// script run in the partition's slot.
//
//	KEYS: offset key
//	ARGV: slot, first, last, now_ms, slack, expect, maxlog,
//	      nrules, {name, message}*nrules,
//	      nprofiles, {maxw, nlimits, {rule, count, w, shadow}*nlimits}*nprofiles,
//	      nsubjects, {field, profile, eval_sec, evaluate, nincs, {sec, n}*nincs}*nsubjects
//
// expect is the offset the caller last stored for the partition (-2 when it
// does not know): when the stored offset differs, another owner moved the
// partition and every subject is evaluated, whatever evaluate says.
//
// Each evaluated subject is evaluated at eval_sec (max of now and its latest
// event) and, when that lies ahead of now, at now too. Per limit: the count;
// when the count reaches half the limit (near), the limit enters the
// subject's state with, when one more event would go over, the second it
// would fit again; when the count is over the limit, a deny (or shadow)
// record, the exceeded limit with the latest until winning.
//
// Returns {0, previous next offset or -1, all (1 when every subject was
// evaluated), {subject, limit, count, until_ms, shadow, eval_sec}* of NEW
// decisions, {subject, headroom}* of evaluated subjects, change seq or 0}
// when applied, {1, next} when the batch is already held, {2, next} when only
// its tail is new (the caller trims and retries), {3, next} when the batch
// starts after the stored offset (the slot lost writes it had acknowledged:
// nothing is written, the caller reads the partition again from next). Headroom is, over the
// subject's limits, the fewest events that would bring one to its near
// threshold (<= 0 when near).
const applyBody = `
local a = ARGV
local offkey = KEYS[1]
local slot = a[1]
local first, last = tonumber(a[2]), tonumber(a[3])
local now_ms, slack = tonumber(a[4]), tonumber(a[5])
local expect, maxlog = tonumber(a[6]), tonumber(a[7])
local now = math.floor(now_ms / 1000)
local prev = redis.call('GET', offkey)
if prev then
  prev = tonumber(prev)
  if last < prev then return {1, prev} end
  if first < prev then return {2, prev} end
  if first > prev then return {3, prev} end
else
  prev = -1
end
local all = prev ~= expect

local i = 8
local rules = {}
local nrules = tonumber(a[i]); i = i + 1
for r = 1, nrules do rules[r] = {a[i], a[i + 1]}; i = i + 2 end

local profiles = {}
local nprof = tonumber(a[i]); i = i + 1
for q = 1, nprof do
  local pr = {maxw = tonumber(a[i]), limits = {}}
  local nl = tonumber(a[i + 1]); i = i + 2
  for l = 1, nl do
    pr.limits[l] = {tonumber(a[i]), tonumber(a[i + 1]), tonumber(a[i + 2]), a[i + 3] == '1'}
    i = i + 4
  end
  profiles[q] = pr
end

local subjects = {}
local nsub = tonumber(a[i]); i = i + 1
for s = 1, nsub do
  local sub = {f = a[i], prof = profiles[tonumber(a[i + 1])], e = tonumber(a[i + 2]), ev = a[i + 3] == '1', incs = {}}
  local ni = tonumber(a[i + 4]); i = i + 5
  for k = 1, ni do
    local sec = tonumber(a[i])
    sub.incs[sec] = (sub.incs[sec] or 0) + tonumber(a[i + 1])
    i = i + 2
  end
  subjects[s] = sub
end

local statekey, expkey = slot .. ':@state', slot .. ':@exp'
local logkey, seqkey = slot .. ':@log', slot .. ':@seq'

-- evaluate one subject at second t into best (deny/shadow per kind) and
-- near (per limit {count, until}); returns the headroom seen at t
local function fg_eval(c, sub, t, best, near)
  local h = nil
  for l, lim in ipairs(sub.prof.limits) do
    local L, w = lim[2], lim[3]
    local count = fg_sum(c, slot, sub.f, t, w)
    local thr = math.floor((L + 1) / 2)
    if h == nil or thr - count < h then h = thr - count end
    if count >= thr then
      local u = 0
      if count >= L then u = fg_until(c, slot, sub.f, t, w, count + 1 - L) end
      local nr = near[l]
      if nr == nil then near[l] = {count, u}
      else nr[1] = math.max(nr[1], count); nr[2] = math.max(nr[2], u) end
    end
    if count > L then
      local u = fg_until(c, slot, sub.f, t, w, count - L)
      local kind = lim[4] and 'shadow' or 'deny'
      if best[kind] == nil or u > best[kind].u then
        best[kind] = {l = l, lim = lim, count = count, u = u, t = t}
      end
    end
  end
  return h or 1000000000000
end

-- Phase 1: every increment and every read, each write recorded; a failing
-- call (WRONGTYPE on a foreign key) undoes them all and fails the run.
local undo = {}
local evals = {}
local seq0
local err = fg_guard(undo, function()
  redis.call('HLEN', statekey)
  redis.call('ZCARD', expkey)
  redis.call('XLEN', logkey)
  seq0 = tonumber(redis.call('GET', seqkey) or '0')
  if seq0 == nil then error({err = 'change sequence ' .. seqkey .. ' is not an integer'}) end
  for s = 1, nsub do
    local sub = subjects[s]
    fg_incr(nil, slot, sub.f, sub.incs, sub.prof.maxw, now, slack, undo)
  end
  for s = 1, nsub do
    local sub = subjects[s]
    if all or sub.ev then
      local c, best, near = {}, {}, {}
      local h = fg_eval(c, sub, sub.e, best, near)
      if sub.e > now then
        -- a window shorter than the skew evaluated only at the future second
        -- would miss the batch's events of now
        h = math.min(h, fg_eval(c, sub, now, best, near))
      end
      local recs = {}
      for kind, b in pairs(best) do recs[kind] = redis.call('GET', slot .. ':' .. sub.f .. ':' .. kind) end
      evals[#evals + 1] = {s = s, best = best, near = near, h = h, recs = recs, old = redis.call('HGET', statekey, sub.f)}
    end
  end
end)
if err then return err end

-- Phase 2: writes that cannot fail on the types checked above.
local out = {0, prev, all and 1 or 0}
local decs, hs, changes, djson = {}, {}, {}, {}
for _, ev in ipairs(evals) do
  local sub = subjects[ev.s]
  for kind, b in pairs(ev.best) do
    local rule = rules[b.lim[1]]
    local u_ms = b.u * 1000
    local old = ev.recs[kind]
    local write, new = true, true
    if old then
      local ok, o = pcall(cjson.decode, old)
      if ok and type(o) == 'table' then
        if tonumber(o['until']) and tonumber(o['until']) >= u_ms then write = false end
        new = write and (o['rule'] ~= rule[1] or o['window'] ~= fg_fmt_window(b.lim[3]))
      end
    end
    if write and u_ms > now_ms then
      redis.call('SET', slot .. ':' .. sub.f .. ':' .. kind, fg_deny_json(rule[1], b.lim[2], b.lim[3], b.count, u_ms, rule[2]), 'PX', u_ms - now_ms)
      if new then
        local shadow = kind == 'shadow'
        for _, x in ipairs({ev.s, b.l, b.count, u_ms, shadow and 1 or 0, b.t}) do decs[#decs + 1] = x end
        djson[#djson + 1] = '{"f":' .. cjson.encode(sub.f) .. ',"rule":' .. cjson.encode(rule[1]) ..
          ',"limit":' .. string.format('%d', b.lim[2]) .. ',"window":"' .. fg_fmt_window(b.lim[3]) ..
          '","count":' .. string.format('%d', b.count) .. ',"until":' .. string.format('%d', u_ms) ..
          ',"shadow":' .. tostring(shadow) .. ',"message":' .. cjson.encode(rule[2]) ..
          ',"ts":' .. string.format('%d', b.t * 1000) .. '}'
      end
    end
  end
  -- state: the near limits in profile order, as the limiter reads them
  local parts, t, x = {}, math.max(sub.e, now), 0
  for l, lim in ipairs(sub.prof.limits) do
    local nr = ev.near[l]
    if nr then
      parts[#parts + 1] = '[' .. cjson.encode(rules[lim[1]][1]) .. ',' .. string.format('%d,%d,%d,%d', lim[2], lim[3], nr[1], nr[2]) .. ']'
      x = math.max(x, nr[2], t + lim[3])
    end
  end
  if #parts > 0 then
    local js = '{"t":' .. string.format('%d', t) .. ',"l":[' .. table.concat(parts, ',') .. ']}'
    if js ~= ev.old then
      redis.call('HSET', statekey, sub.f, js)
      redis.call('ZADD', expkey, x, sub.f)
      changes[#changes + 1] = '[' .. cjson.encode(sub.f) .. ',' .. js .. ']'
    end
  elseif ev.old then
    redis.call('HDEL', statekey, sub.f)
    redis.call('ZREM', expkey, sub.f)
    changes[#changes + 1] = '[' .. cjson.encode(sub.f) .. ',null]'
  end
  hs[#hs + 1] = ev.s
  hs[#hs + 1] = ev.h
end
out[4] = decs
out[5] = hs

-- states that no longer say anything: bounded work per run; the limiter
-- drops them at the same second on its own
local gone = redis.call('ZRANGEBYSCORE', expkey, '-inf', now, 'LIMIT', 0, 64)
if #gone > 0 then
  redis.call('HDEL', statekey, unpack(gone))
  redis.call('ZREM', expkey, unpack(gone))
end
redis.call('SET', offkey, string.format('%d', last + 1))

local seq = 0
if #changes > 0 or #djson > 0 then
  seq = seq0 + 1
  redis.call('SET', seqkey, seq)
  local x = {'XADD', logkey, 'MAXLEN', '~', maxlog, '*', 'q', seq, 'o', last + 1}
  if #changes > 0 then x[#x + 1] = 's'; x[#x + 1] = '[' .. table.concat(changes, ',') .. ']' end
  if #djson > 0 then x[#x + 1] = 'd'; x[#x + 1] = '[' .. table.concat(djson, ',') .. ']' end
  redis.call(unpack(x))
end
out[6] = seq
return out
`

// resumeBody reads a partition's next offset: a script rather than a GET so
// that the Store needs nothing of Redis but scripts.
const resumeBody = `return redis.call('GET', KEYS[1])`
