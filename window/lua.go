package window

// LuaLib is the Lua shared by every floodgate script that touches a
// subject's buckets: the aggregator's apply script, the limiter's check
// script, and the strict-mode take script (window/take.go). Prepend it to a
// script body; everything is local to the script.
//
// Time is in whole Unix seconds. A subject's keys are
//
//	P:{action:kind:subject}:s:<minute>  hash second-of-minute (0-59) -> count
//	P:{action:kind:subject}:m:<hour>    hash minute-of-hour   (0-59) -> count
//	P:{action:kind:subject}:h:<day>     hash hour-of-day      (0-23) -> count
//
// where <minute>, <hour>, <day> are Unix seconds divided by 60, 3600, 86400.
// Every event is added at each level the subject's longest window needs
// (seconds always, minutes from 1m, hours from 1h), so the levels agree.
//
// Functions (c is a per-run read cache: a fresh {} per script call, and a
// fresh one again after writing buckets that are read later):
//
//	fg_key(p, tag, level, n)            -> key of bucket hash n of a level ('s','m','h')
//	fg_hash(c, key)                     -> table field->count of one hash (one HGETALL, cached)
//	fg_split(a, b, w)                   -> segments covering seconds [a, b] in time order,
//	                                       coarsest levels a window of w seconds may use
//	fg_sum(c, p, tag, now, w)           -> events in the window of w seconds ending with second now
//	fg_until(c, p, tag, now, w, excess, ahead)
//	                                    -> first second t > now at which that window, plus
//	                                       the seconds up to now+ahead (events of callers whose
//	                                       clocks run ahead; 0 or nil for none), has dropped
//	                                       excess events (exact to the second)
//	fg_incr(p, tag, incs, maxw, now, slack)
//	                                    -> add incs (table second->count) at every level maxw
//	                                       needs; new hashes expire when no window can read them
//	fg_fmt_window(w)                    -> "30s", "5m", "1h", "1d"
//	fg_deny_json(rule, limit, w, count, until_ms, message)
//	                                    -> deny record JSON (see Deny)
const LuaLib = `
local function fg_key(p, tag, level, n)
  return p .. ':' .. tag .. ':' .. level .. ':' .. string.format('%d', n)
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
  if w < 3600 then fg_segs_sm(out, a, b, w >= 60) return out end
  local h1 = math.ceil(a / 3600)
  local h2 = math.floor((b + 1) / 3600) - 1
  if h1 > h2 then fg_segs_sm(out, a, b, true) return out end
  fg_segs_sm(out, a, h1 * 3600 - 1, true)
  fg_segs(out, 'h', 24, h1, h2)
  fg_segs_sm(out, (h2 + 1) * 3600, b, true)
  return out
end

local function fg_seg_sum(c, p, tag, seg)
  local t = fg_hash(c, fg_key(p, tag, seg[1], seg[2]))
  local s = 0
  for f, v in pairs(t) do
    if f >= seg[3] and f <= seg[4] then s = s + v end
  end
  return s
end

local function fg_sum(c, p, tag, now, w)
  local segs = fg_split(now - w + 1, now, w)
  local s = 0
  for i = 1, #segs do s = s + fg_seg_sum(c, p, tag, segs[i]) end
  return s
end

-- fg_walk goes through a segment's buckets in time order until need events
-- were seen; it returns the events seen and the second of the event that
-- completes need (drilling hours -> minutes -> seconds), or nil.
local fg_walk
fg_walk = function(c, p, tag, seg, need)
  local t = fg_hash(c, fg_key(p, tag, seg[1], seg[2]))
  local fs = {}
  for f, _ in pairs(t) do
    if f >= seg[3] and f <= seg[4] then fs[#fs + 1] = f end
  end
  table.sort(fs)
  local got = 0
  for _, f in ipairs(fs) do
    local v = t[f]
    if got + v >= need then
      if seg[1] == 's' then return got + v, seg[2] * 60 + f end
      local sub, last
      if seg[1] == 'm' then
        local m = seg[2] * 60 + f
        sub, last = {'s', m, 0, 59}, m * 60 + 59
      else
        local h = seg[2] * 24 + f
        sub, last = {'m', h, 0, 59}, h * 3600 + 3599
      end
      local _, sec = fg_walk(c, p, tag, sub, need - got)
      -- A missing finer level (rules changed, keys evicted) falls back to
      -- the end of the coarse bucket: late, never early.
      return got + v, sec or last
    end
    got = got + v
  end
  return got, nil
end

local function fg_until(c, p, tag, now, w, excess, ahead)
  local segs = fg_split(now - w + 1, now, w)
  if ahead and ahead > 0 then fg_segs(segs, 's', 60, now + 1, now + ahead) end
  local need = excess
  for i = 1, #segs do
    local got, sec = fg_walk(c, p, tag, segs[i], need)
    if sec then return sec + w end
    need = need - got
  end
  return now + w
end

local function fg_hincr(key, field, n, ttl)
  if redis.call('HINCRBY', key, field, n) == n then
    if ttl < 1 then ttl = 1 end
    redis.call('EXPIRE', key, ttl)
  end
end

local function fg_incr(p, tag, incs, maxw, now, slack)
  local ms, hs = {}, {}
  for sec, n in pairs(incs) do
    local m = math.floor(sec / 60)
    local sk = fg_key(p, tag, 's', m)
    fg_hincr(sk, sec - m * 60, n, (m + 1) * 60 + maxw + slack - now)
    if maxw >= 60 then ms[m] = (ms[m] or 0) + n end
    if maxw >= 3600 then
      local h = math.floor(sec / 3600)
      hs[h] = (hs[h] or 0) + n
    end
  end
  for m, n in pairs(ms) do
    local h = math.floor(m / 60)
    fg_hincr(fg_key(p, tag, 'm', h), m - h * 60, n, (h + 1) * 3600 + maxw + slack - now)
  end
  for h, n in pairs(hs) do
    local d = math.floor(h / 24)
    fg_hincr(fg_key(p, tag, 'h', d), h - d * 24, n, (d + 1) * 86400 + maxw + slack - now)
  end
end

local function fg_fmt_window(w)
  if w % 86400 == 0 then return string.format('%dd', w / 86400) end
  if w % 3600 == 0 then return string.format('%dh', w / 3600) end
  if w % 60 == 0 then return string.format('%dm', w / 60) end
  return string.format('%ds', w)
end

local function fg_deny_json(rule, limit, w, count, until_ms, message)
  return '{"rule":' .. cjson.encode(rule) ..
    ',"limit":' .. string.format('%d', limit) ..
    ',"window":"' .. fg_fmt_window(w) ..
    '","count":' .. string.format('%d', count) ..
    ',"until":' .. string.format('%d', until_ms) ..
    ',"message":' .. cjson.encode(message) .. '}'
end
`

// applyBody applies one batch of one partition and evaluates the touched
// subjects. It is atomic: the offset check, every increment, the new offset
// and the deny records happen in one script run.
//
//	ARGV: prefix, offset key, first, last, now_ms, slack,
//	      nrules, {name, message}*nrules,
//	      nprofiles, {maxw, nlimits, {rule, count, w, shadow}*nlimits}*nprofiles,
//	      nsubjects, {tag, profile, eval_sec, nincs, {sec, n}*nincs}*nsubjects
//
// Each subject is evaluated at eval_sec (max of now and its latest event)
// and, when that lies ahead of now, at now too; per kind (deny, shadow) the
// exceeded limit with the latest until wins.
//
// Returns {0, previous next offset or -1, {subject, limit, count, until_ms,
// shadow, eval_sec}* of NEW decisions} when applied, {1, next} when the batch is
// already held, {2, next} when only its tail is new (the caller trims and
// retries).
const applyBody = `
local a = ARGV
local p, offkey = a[1], a[2]
local first, last = tonumber(a[3]), tonumber(a[4])
local now_ms, slack = tonumber(a[5]), tonumber(a[6])
local now = math.floor(now_ms / 1000)
local prev = redis.call('GET', offkey)
if prev then
  prev = tonumber(prev)
  if last < prev then return {1, prev} end
  if first < prev then return {2, prev} end
else
  prev = -1
end

local i = 7
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
  local sub = {tag = a[i], prof = profiles[tonumber(a[i + 1])], e = tonumber(a[i + 2]), incs = {}}
  local ni = tonumber(a[i + 3]); i = i + 4
  for k = 1, ni do
    local sec = tonumber(a[i])
    sub.incs[sec] = (sub.incs[sec] or 0) + tonumber(a[i + 1])
    i = i + 2
  end
  subjects[s] = sub
  fg_incr(p, sub.tag, sub.incs, sub.prof.maxw, now, slack)
end
redis.call('SET', offkey, string.format('%d', last + 1))

local out = {0, prev}
for s = 1, nsub do
  local sub = subjects[s]
  local c = {}
  local best = {}
  -- at the subject's latest event and, when that lies ahead (within the
  -- accepted skew), at now too: a window shorter than the skew evaluated
  -- only at the future second would miss the batch's events of now (on
  -- equal until, the later evaluation's decision is kept)
  local at = {sub.e}
  if sub.e > now then at[2] = now end
  for _, t in ipairs(at) do
    for l, lim in ipairs(sub.prof.limits) do
      local count = fg_sum(c, p, sub.tag, t, lim[3])
      if count > lim[2] then
        local u = fg_until(c, p, sub.tag, t, lim[3], count - lim[2])
        local kind = lim[4] and 'shadow' or 'deny'
        if best[kind] == nil or u > best[kind].u then
          best[kind] = {l = l, lim = lim, count = count, u = u, t = t}
        end
      end
    end
  end
  for kind, b in pairs(best) do
    local key = p .. ':' .. sub.tag .. ':' .. kind
    local rule = rules[b.lim[1]]
    local u_ms = b.u * 1000
    local old = redis.call('GET', key)
    local write, new = true, true
    if old then
      local ok, o = pcall(cjson.decode, old)
      if ok and type(o) == 'table' then
        if tonumber(o['until']) and tonumber(o['until']) >= u_ms then write = false end
        new = write and (o['rule'] ~= rule[1] or o['window'] ~= fg_fmt_window(b.lim[3]))
      end
    end
    if write and u_ms > now_ms then
      redis.call('SET', key, fg_deny_json(rule[1], b.lim[2], b.lim[3], b.count, u_ms, rule[2]), 'PX', u_ms - now_ms)
      if new then
        out[#out + 1] = s
        out[#out + 1] = b.l
        out[#out + 1] = b.count
        out[#out + 1] = u_ms
        out[#out + 1] = kind == 'shadow' and 1 or 0
        out[#out + 1] = b.t
      end
    end
  end
end
return out
`

// checkBody reads, for each queried subject, its deny record and the sum
// of each requested window.
//
//	ARGV: prefix, now_ms, nqueries, {tag, nwindows, w*nwindows}*nqueries
//
// Returns {{deny JSON or false, sum*nwindows}*nqueries}.
const checkBody = `
local a = ARGV
local p = a[1]
local now = math.floor(tonumber(a[2]) / 1000)
local nq = tonumber(a[3])
local i = 4
local out = {}
for q = 1, nq do
  local tag = a[i]
  local nw = tonumber(a[i + 1]); i = i + 2
  local c = {}
  local r = {redis.call('GET', p .. ':' .. tag .. ':deny')}
  for k = 1, nw do
    r[k + 1] = fg_sum(c, p, tag, now, tonumber(a[i]))
    i = i + 1
  end
  out[q] = r
end
return out
`

// resumeBody reads a partition's next offset: a script rather than a GET so
// that the Store needs nothing of Redis but scripts.
const resumeBody = `return redis.call('GET', ARGV[1])`
