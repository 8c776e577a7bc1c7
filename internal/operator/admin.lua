local a = ARGV
local slot, f, op = a[1], a[2], a[3]
local now_ms, maxlog = tonumber(a[4]), tonumber(a[5])
local rule, banjs, audit = a[6], a[7], a[8]
local maxw, slack, ahead = tonumber(a[9]), tonumber(a[10]), tonumber(a[11])
local offkey = a[12]
local distinct = {}
for i = 1, tonumber(a[13]) do distinct[i] = a[13 + i] end
local now = math.floor(now_ms / 1000)
local statekey, expkey = slot .. ':@state', slot .. ':@exp'
local logkey, seqkey, banskey = slot .. ':@log', slot .. ':@seq', slot .. ':@bans'
local denykey, shadowkey = slot .. ':' .. f .. ':deny', slot .. ':' .. f .. ':shadow'

-- Phase 1: reads and type checks.
local deny = redis.call('GET', denykey)
local shadow = redis.call('GET', shadowkey)
local bans = redis.call('HGETALL', banskey)
local ban = redis.call('HGET', banskey, f)
local state = redis.call('HGET', statekey, f)
redis.call('ZCARD', expkey)
redis.call('XLEN', logkey)
local seq = tonumber(redis.call('GET', seqkey) or '0')
if seq == nil then return redis.error_reply('floodgate: change sequence ' .. seqkey .. ' is not an integer') end
local offset = -1
if offkey ~= '' then offset = tonumber(redis.call('GET', offkey) or '-1') or -1 end

local function of_rule(js)
  if rule == '' then return true end
  local ok, o = pcall(cjson.decode, js)
  return ok and type(o) == 'table' and o['rule'] == rule
end

-- the state without rule's limits and buckets (written as the apply script
-- writes it): nil when nothing is left
local function state_without(js)
  if rule == '' then return nil end
  local ok, o = pcall(cjson.decode, js)
  if not ok or type(o) ~= 'table' then return nil end
  local ls, bs = o['l'] or {}, o['b'] or {}
  local parts, bparts = {}, {}
  for _, l in ipairs(ls) do
    if l[1] ~= rule then
      parts[#parts + 1] = '[' .. cjson.encode(l[1]) .. ',' .. string.format('%d,%d,%d,%d', l[2], l[3], l[4], l[5]) .. ']'
    end
  end
  for _, b in ipairs(bs) do
    if b[1] ~= rule then bparts[#bparts + 1] = '[' .. cjson.encode(b[1]) .. ',' .. string.format('%d', b[2]) .. ']' end
  end
  if #parts + #bparts == 0 then return nil end
  if #parts == #ls and #bparts == #bs then return js end
  local out = '{"t":' .. string.format('%d', o['t']) .. ',"l":[' .. table.concat(parts, ',') .. ']'
  if #bparts > 0 then out = out .. ',"b":[' .. table.concat(bparts, ',') .. ']' end
  return out .. '}'
end

local function del_level(level, per, lo, hi)
  local keys, n = {}, 0
  for i = math.floor(lo / per), math.floor(hi / per) do
    keys[#keys + 1] = fg_key(slot, f, level, i)
    if #keys == 500 then n = n + redis.call('DEL', unpack(keys)); keys = {} end
  end
  if #keys > 0 then n = n + redis.call('DEL', unpack(keys)) end
  return n
end

-- Phase 2: writes, on the types checked above.
local cleared, states, banch, buckets = {}, nil, nil, 0
if op == 'ban' then
  redis.call('HSET', banskey, f, banjs)
  banch = banjs
else
  if deny and of_rule(deny) then redis.call('DEL', denykey); cleared[#cleared + 1] = 'deny' end
  if shadow and of_rule(shadow) then redis.call('DEL', shadowkey); cleared[#cleared + 1] = 'shadow' end
  if ban and rule == '' then
    redis.call('HDEL', banskey, f)
    cleared[#cleared + 1] = 'ban'
    banch = 'null'
  end
  if state then
    local js = state_without(state)
    if js == nil then
      redis.call('HDEL', statekey, f)
      redis.call('ZREM', expkey, f)
      states = 'null'
      cleared[#cleared + 1] = 'state'
    elseif js ~= state then
      redis.call('HSET', statekey, f, js)
      states = js
      cleared[#cleared + 1] = 'state'
    end
  end
end
if op == 'reset' then
  buckets = del_level('s', 60, now - maxw - slack - 60, now + ahead)
    + del_level('m', 3600, now - maxw - slack - 3600, now + ahead)
    + del_level('h', 86400, now - maxw - slack - 86400, now + ahead)
    + redis.call('DEL', slot .. ':' .. f .. ':g')
  for _, k in ipairs(distinct) do buckets = buckets + redis.call('DEL', slot .. ':' .. f .. ':d:' .. k) end
  -- a write-back owner holds counts in memory past its checkpoint: it
  -- replays from there without the subject's events before this offset
  if offset >= 0 then redis.call('HSET', slot .. ':@resets', f, string.format('%d', offset)) end
end
-- bans that ended: bounded by the operators' own activity
for i = 1, #bans, 2 do
  if bans[i] ~= f then
    local ok, b = pcall(cjson.decode, bans[i + 1])
    if not ok or type(b) ~= 'table' or not tonumber(b['until']) or tonumber(b['until']) <= now_ms then
      redis.call('HDEL', banskey, bans[i])
    end
  end
end

local extra = ''
if #cleared > 0 then extra = ',"cleared":["' .. table.concat(cleared, '","') .. '"]' end
if op == 'reset' then
  extra = extra .. ',"deleted_keys":' .. string.format('%d', buckets)
  if offset >= 0 then extra = extra .. ',"offset":' .. string.format('%d', offset) end
end
audit = string.sub(audit, 1, -2) .. extra .. '}'

seq = seq + 1
redis.call('SET', seqkey, seq)
local fj = cjson.encode(f)
local x = {'XADD', logkey, 'MAXLEN', '~', maxlog, '*', 'q', seq, 'o', string.format('%d', offset)}
if states then x[#x + 1] = 's'; x[#x + 1] = '[[' .. fj .. ',' .. states .. ']]' end
if banch then x[#x + 1] = 'b'; x[#x + 1] = '[[' .. fj .. ',' .. banch .. ']]' end
x[#x + 1] = 'd'; x[#x + 1] = '[' .. audit .. ']'
local id = redis.call(unpack(x))
return {seq, id, cleared, buckets, offset}
