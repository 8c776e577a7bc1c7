local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local id = '0-0'
if #last > 0 then id = last[1][1] end
return {id, tonumber(redis.call('GET', KEYS[2]) or '0'), redis.call('HGETALL', KEYS[3])}
