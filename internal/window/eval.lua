-- reply codes: each request's first value (window/read.go, takeTaken)
local TAKEN, NOT_TAKEN = 1, 0

-- events in seconds now+1 .. now+ahead (second buckets always exist): what
-- callers whose clocks run ahead of this one have already counted
local function fg_ahead(c, slot, f, now, ahead)
  if ahead < 1 then return 0 end
  local segs = {}
  fg_segs(segs, 's', 60, now + 1, now + ahead)
  local s = 0
  for i = 1, #segs do s = s + fg_seg_sum(c, slot, f, segs[i]) end
  return s
end

local a = ARGV
local slot = a[1]
local now_ms = tonumber(a[2])
local now = math.floor(now_ms / 1000)
local now_us = now_ms * 1000
local slack, ahead = tonumber(a[3]), tonumber(a[4])
local nreq = tonumber(a[5])
-- the take stream's cap: a take's events are queued for the partition
-- owner's relay only while it holds fewer entries (0: never)
local qmax = tonumber(a[6])
local takes = slot .. ':@takes'
local qlen -- the stream's length, read at the run's first queued take
local i = 7
local c = {}
local undo = {}
local out = {}
local err = fg_guard(undo, function()
  for r = 1, nreq do
    local n, take, nsub = tonumber(a[i]), a[i + 1] == '1', tonumber(a[i + 2])
    -- the take's events, "<key length>:<key><value>" each (window/read.go)
    local ne = tonumber(a[i + 3])
    local evs = {}
    for e = 1, ne do evs[2 * e - 1] = e; evs[2 * e] = a[i + 3 + e] end
    i = i + 4 + ne
    local rows, subs = {}, {}
    local blocked = false
    for s = 1, nsub do
      local f, maxw, count = a[i], tonumber(a[i + 1]), a[i + 2] == '1'
      local nb = tonumber(a[i + 3]); i = i + 4
      local block = {}
      for b = 1, nb do block[a[i]] = true; i = i + 1 end
      local nv = tonumber(a[i]); i = i + 1
      local vals = {} -- distinct kind -> the request's value
      for v = 1, nv do vals[a[i]] = a[i + 1]; i = i + 2 end
      local early = fg_ahead(c, slot, f, now, ahead)
      local deny = redis.call('GET', slot .. ':' .. f .. ':deny')
      local row = {deny}
      if deny and take and nb > 0 then
        local ok, d = pcall(cjson.decode, deny)
        if ok and type(d) == 'table' and block[d['rule']] and (tonumber(d['until']) or 0) > now_ms then blocked = true end
      end
      local nl = tonumber(a[i]); i = i + 1
      local seen = {}
      for l = 1, nl do
        local lim, w, blk, dk = tonumber(a[i]), tonumber(a[i + 1]), a[i + 2] == '1', a[i + 3]
        i = i + 4
        local sum, add
        if dk ~= '' then
          -- distinct values: the request's own value adds one unless the
          -- window saw it already; without one, assume a new value
          local key = slot .. ':' .. f .. ':d:' .. dk
          sum = fg_dcount(key, now - w + 1, now + ahead)
          add = n
          local v = vals[dk]
          if v then
            local last = redis.call('ZSCORE', key, v)
            if last and tonumber(last) >= now - w + 1 then add = 0 end
            seen[dk] = v
          end
        else
          sum = fg_sum(c, slot, f, now, w) + early
          add = n
        end
        local u = 0
        if add > 0 and sum + add > lim then
          if dk ~= '' then
            u = fg_duntil(slot .. ':' .. f .. ':d:' .. dk, now - w + 1, now + ahead, w, sum + add - lim)
          else
            u = fg_until(c, slot, f, now, w, sum + add - lim, ahead)
          end
          if blk then blocked = true end
        end
        row[#row + 1] = sum
        row[#row + 1] = u
      end
      local nbk = tonumber(a[i]); i = i + 1
      local bks = {}
      for b = 1, nbk do
        local name, T, burst, blk = a[i], tonumber(a[i + 1]), tonumber(a[i + 2]), a[i + 3] == '1'
        i = i + 4
        local tat = tonumber(redis.call('HGET', slot .. ':' .. f .. ':g', name) or '0')
        local new = math.max(tat, now_us) + n * T
        local allow_at = new - T * burst
        local u = 0
        if allow_at > now_us then
          u = allow_at
          if blk then blocked = true end
        end
        row[#row + 1] = tat
        row[#row + 1] = u
        bks[b] = {name, new}
      end
      local ban = fg_ban(slot, f, now_ms)
      if ban and take then blocked = true end
      row[#row + 1] = ban or false
      rows[s] = row
      subs[s] = {f, maxw, count, seen, bks}
    end
    local taken, queued, entry = NOT_TAKEN, 0, ''
    if take and not blocked then
      -- a subject queried twice is counted once: every row checked sum + n,
      -- so counting n per row would overshoot
      local done = {}
      for s = 1, nsub do
        local sub = subs[s]
        if sub[3] and not done[sub[1]] then
          done[sub[1]] = true
          fg_incr(c, slot, sub[1], {[now] = n}, sub[2], now, slack, undo)
          for dk, v in pairs(sub[4]) do fg_zseen(slot .. ':' .. sub[1] .. ':d:' .. dk, v, now, undo) end
          for _, bk in ipairs(sub[5]) do fg_hset(slot .. ':' .. sub[1] .. ':g', bk[1], string.format('%d', bk[2]), undo) end
          -- bounded as the apply script bounds the aggregator's writes: a
          -- distinct set keeps what a window can read, at most MAXDISTINCT
          -- values, and expires with the longest window; arrival times
          -- expire once the bucket has refilled
          for dk, _ in pairs(sub[4]) do
            local key = slot .. ':' .. sub[1] .. ':d:' .. dk
            redis.call('ZREMRANGEBYSCORE', key, '-inf', now - sub[2])
            redis.call('ZREMRANGEBYRANK', key, 0, -(MAXDISTINCT + 1))
            redis.call('EXPIRE', key, sub[2] + slack)
          end
          if #sub[5] > 0 then
            local ttl = slack
            for _, bk in ipairs(sub[5]) do ttl = math.max(ttl, math.ceil((bk[2] - now_us) / 1000000) + slack) end
            redis.call('EXPIRE', slot .. ':' .. sub[1] .. ':g', ttl)
          end
        end
      end
      taken = TAKEN
      -- the events go out with the count (one entry per take, Kafka key
      -- and value pairs) unless the stream is full: its owner is not
      -- relaying, and the caller publishes them itself
      if ne > 0 and qmax > 0 then
        qlen = qlen or redis.call('XLEN', takes)
        if qlen < qmax then
          entry = redis.call('XADD', takes, '*', unpack(evs))
          qlen, queued = qlen + 1, 1
        end
      end
    end
    -- the entry, so that a refund can take the events back with the count
    out[r] = {taken, rows, queued, entry}
  end
end)
if err then return err end
return out
