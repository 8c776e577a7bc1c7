-- A write-back batch's decisions (live/writeback.go): every subject of the
-- batch is counted in the owner's memory and evaluated there, so all this
-- writes is verdicts — deny and shadow records, states, one change entry —
-- and the decisions offset D, compare-and-set on D and the change sequence.
-- Its reply has apply.lua's shape, so the caller reads both alike.
-- KEYS[1]: D. ARGV: slot, expected D (-1: none stored), new D, now ms,
-- keep ms, max log, expected change sequence, n subjects, extend only
-- ('1': a new owner writing the verdicts its predecessor held back past
-- its checkpoint, live/carried.go; else '0'), then per subject (extend
-- only: first the SHA-1 of the state it may be written over)
-- {field, field as JSON, state JSON or '', state expiry, n candidates, then
-- per candidate {kind 'deny'|'shadow', limit index, rule, window as
-- fg_fmt_window writes it ('' for none), count, until ms, evaluated second,
-- its deny record's JSON up to the value of "since", its decision's JSON}}
-- (live/decideargs.go builds the JSON: Lua's string building was most of
-- this script's time).

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
local extend_only = a[9] == '1'
local subs = {}
local i = 10
for s = 1, tonumber(a[8]) do
  local over
  if extend_only then over = a[i]; i = i + 1 end
  local sub = {f = a[i], fj = a[i + 1], js = a[i + 2], x = tonumber(a[i + 3]), cands = {}, over = over}
  local nc = tonumber(a[i + 4]); i = i + 5
  for k = 1, nc do
    local c = {kind = a[i], l = tonumber(a[i + 1]), rule = a[i + 2], wfmt = a[i + 3], count = tonumber(a[i + 4]),
      u_ms = tonumber(a[i + 5]), t = tonumber(a[i + 6]), head = a[i + 7], dj = a[i + 8]}
    c.key = slot .. ':' .. sub.f .. ':' .. c.kind
    c.old = redis.call('GET', c.key)
    sub.cands[k] = c
    i = i + 9
  end
  sub.old = redis.call('HGET', statekey, sub.f)
  subs[s] = sub
end

-- extends tells whether sub's held-back verdict may be written: its slot
-- holds the very state the owner that held it back wrote last. An
-- operator's unban or reset since (the state gone or changed), or a later
-- verdict written, makes it one to drop.
local function extends(sub)
  return sub.old ~= nil and sub.over ~= nil and redis.sha1hex(sub.old) == sub.over
end

-- Phase 2: writes, as apply.lua writes verdicts.
local decs, exts, changes, djson = {}, {}, {}, {}
for s, sub in ipairs(subs) do
  if extend_only and not extends(sub) then sub.skip = true end
  for _, c in ipairs(sub.skip and {} or sub.cands) do
    local write, new, since = true, true, c.t * 1000
    -- The old record's fields, read by pattern: a key's name inside a
    -- JSON string (the message) is escaped (\"until\":), so what matches
    -- is the record's own key.
    local ou = c.old and tonumber(string.match(c.old, '"until":(%-?%d+)'))
    if ou and ou > now_ms then
      if ou >= c.u_ms then write = false end
      new = write and (string.match(c.old, '"rule":"([^"]*)"') ~= c.rule or string.match(c.old, '"window":"([^"]*)"') ~= c.wfmt)
      if not new then since = tonumber(string.match(c.old, '"since":(%-?%d+)')) or since end
    end
    if write and c.u_ms > now_ms then
      redis.call('SET', c.key, c.head .. string.format('%d', since) .. '}', 'PX', c.u_ms - now_ms + keep_ms)
      local shadow = c.kind == 'shadow'
      local list = new and decs or exts
      for _, x in ipairs({s, c.l, c.count, c.u_ms, shadow and 1 or 0, c.t}) do list[#list + 1] = x end
      if new then djson[#djson + 1] = c.dj end
    end
  end
  if not sub.skip then fg_state(statekey, expkey, sub.f, sub.js, sub.old, sub.x, changes, sub.fj) end
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
