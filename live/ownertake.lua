-- Stage B's take round of one partition (ownertake.go): for each take, the
-- deny records and bans that block it; a take nothing blocks appends its
-- events to the partition's take stream (unless check only), one entry per
-- take, each field "o<i>" so that the relay publishes it for the apply to
-- count (no "counted" header). A full stream refuses the take: its owner's
-- relay is not keeping up.
--
-- KEYS: the take stream
-- ARGV: slot, now_ms, stream cap (0: none), ntakes,
--       {append (1/0), nsub, {field, nblock, {rule}*nblock}*nsub, nev, {event}*nev}*ntakes
-- Reply per take: {status, entry id or '', {deny JSON or false, ban JSON or false}*nsub}
-- status: 1 appended (or, check only, nothing blocks), 0 blocked, 2 stream full
local a = ARGV
local slot, now_ms, qmax, ntakes = a[1], tonumber(a[2]), tonumber(a[3]), tonumber(a[4])
local qlen
local i = 5
local out = {}
for t = 1, ntakes do
  local append, nsub = a[i] == '1', tonumber(a[i + 1])
  i = i + 2
  local rows, blocked = {}, false
  for s = 1, nsub do
    local f, nb = a[i], tonumber(a[i + 1])
    i = i + 2
    local block = {}
    for b = 1, nb do block[a[i]] = true; i = i + 1 end
    local deny = redis.call('GET', slot .. ':' .. f .. ':deny')
    if deny and nb > 0 then
      local ok, d = pcall(cjson.decode, deny)
      if ok and type(d) == 'table' and block[d['rule']] and (tonumber(d['until']) or 0) > now_ms then blocked = true end
    end
    local ban = fg_ban(slot, f, now_ms)
    if ban then blocked = true end
    rows[s] = {deny or false, ban or false}
  end
  local nev = tonumber(a[i]); i = i + 1
  local status, entry = 1, ''
  if blocked then
    status = 0
  elseif append and nev > 0 then
    qlen = qlen or redis.call('XLEN', KEYS[1])
    if qmax > 0 and qlen >= qmax then
      status = 2
    else
      local evs = {}
      for e = 1, nev do evs[2 * e - 1] = 'o' .. e; evs[2 * e] = a[i + e - 1] end
      entry = redis.call('XADD', KEYS[1], '*', unpack(evs))
      qlen = qlen + 1
    end
  end
  i = i + nev
  out[t] = {status, entry, rows}
end
return out
