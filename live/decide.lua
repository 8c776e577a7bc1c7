-- A write-back batch's decisions (live/writeback.go): every subject of the
-- batch is counted in the owner's memory and evaluated there, so all this
-- writes is verdicts — deny and shadow records, states, one change entry —
-- and the decisions offset D, compare-and-set on D and the change sequence.
-- Its reply has apply.lua's shape, so the caller reads both alike.
-- KEYS[1]: D. ARGV: slot, expected D (-1: none stored), new D, now ms,
-- keep ms, max log, expected change sequence, n subjects, then per subject
-- {field, state JSON or '', state expiry, n candidates, then per candidate
-- {kind 'deny'|'shadow', limit index, rule, message, limit, window s,
-- count, until ms, evaluated second}}.

-- reply codes: apply.lua's
local APPLIED, STALE = 0, 5

local a = ARGV
local offkey, slot = KEYS[1], a[1]
local expect, newd = tonumber(a[2]), tonumber(a[3])
local now_ms, keep_ms, maxlog = tonumber(a[4]), tonumber(a[5]), tonumber(a[6])
local gseq = tonumber(a[7])
local now = math.floor(now_ms / 1000)
local statekey, expkey = slot .. ':@state', slot .. ':@exp'
local logkey, seqkey = slot .. ':@log', slot .. ':@seq'

local prev = tonumber(redis.call('GET', offkey) or '-1')
local seq0 = tonumber(redis.call('GET', seqkey) or '0')
if prev ~= expect or seq0 ~= gseq then return {STALE, prev or -1} end

-- Phase 1: parse, and every read (a wrong type fails here, before writes).
redis.call('HLEN', statekey)
redis.call('ZCARD', expkey)
redis.call('XLEN', logkey)
local subs = {}
local i = 9
for s = 1, tonumber(a[8]) do
  local sub = {f = a[i], js = a[i + 1], x = tonumber(a[i + 2]), cands = {}}
  local nc = tonumber(a[i + 3]); i = i + 4
  for k = 1, nc do
    local c = {kind = a[i], l = tonumber(a[i + 1]), rule = a[i + 2], msg = a[i + 3], L = tonumber(a[i + 4]),
      w = tonumber(a[i + 5]), count = tonumber(a[i + 6]), u_ms = tonumber(a[i + 7]), t = tonumber(a[i + 8])}
    c.key = slot .. ':' .. sub.f .. ':' .. c.kind
    c.old = redis.call('GET', c.key)
    sub.cands[k] = c
    i = i + 9
  end
  sub.old = redis.call('HGET', statekey, sub.f)
  subs[s] = sub
end

-- Phase 2: writes, as apply.lua writes verdicts.
local decs, exts, changes, djson = {}, {}, {}, {}
for s, sub in ipairs(subs) do
  for _, c in ipairs(sub.cands) do
    local wfmt = fg_fmt_window(c.w)
    local write, new, since = true, true, c.t * 1000
    if c.old then
      local ok, o = pcall(cjson.decode, c.old)
      if ok and type(o) == 'table' and tonumber(o['until']) and tonumber(o['until']) > now_ms then
        if tonumber(o['until']) >= c.u_ms then write = false end
        new = write and (o['rule'] ~= c.rule or o['window'] ~= wfmt)
        if not new and tonumber(o['since']) then since = tonumber(o['since']) end
      end
    end
    if write and c.u_ms > now_ms then
      redis.call('SET', c.key, fg_deny_json(c.rule, c.L, c.w, c.count, c.u_ms, c.msg, since), 'PX', c.u_ms - now_ms + keep_ms)
      local shadow = c.kind == 'shadow'
      local list = new and decs or exts
      for _, x in ipairs({s, c.l, c.count, c.u_ms, shadow and 1 or 0, c.t}) do list[#list + 1] = x end
      if new then
        djson[#djson + 1] = '{"f":' .. cjson.encode(sub.f) .. ',"rule":' .. cjson.encode(c.rule) ..
          ',"limit":' .. string.format('%d', c.L) .. ',"window":"' .. wfmt ..
          '","count":' .. string.format('%d', c.count) .. ',"until":' .. string.format('%d', c.u_ms) ..
          ',"shadow":' .. tostring(shadow) .. ',"message":' .. cjson.encode(c.msg) ..
          ',"ts":' .. string.format('%d', c.t * 1000) .. '}'
      end
    end
  end
  fg_state(statekey, expkey, sub.f, sub.js, sub.old, sub.x, changes)
end

fg_prune_states(statekey, expkey, now)
redis.call('SET', offkey, string.format('%d', newd))

local seq = 0
if #changes > 0 or #djson > 0 then
  seq = seq0 + 1
  redis.call('SET', seqkey, seq)
  local xa = {'XADD', logkey, 'MAXLEN', '~', maxlog, '*', 'q', seq, 'o', newd}
  if #changes > 0 then xa[#xa + 1] = 's'; xa[#xa + 1] = '[' .. table.concat(changes, ',') .. ']' end
  if #djson > 0 then xa[#xa + 1] = 'd'; xa[#xa + 1] = '[' .. table.concat(djson, ',') .. ']' end
  redis.call(unpack(xa))
end
return {APPLIED, prev, 0, decs, {}, seq, exts, seq > 0 and seq or seq0}
