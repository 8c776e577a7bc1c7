local function fg_ban(slot, f, now_ms)
  local js = redis.call('HGET', slot .. ':@bans', f)
  if not js then return nil end
  local ok, b = pcall(cjson.decode, js)
  if ok and type(b) == 'table' and tonumber(b['until']) and tonumber(b['until']) > now_ms then return js end
  return nil
end
