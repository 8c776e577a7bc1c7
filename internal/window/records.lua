local slot, f = ARGV[1], ARGV[2]
return {
  redis.call('GET', slot .. ':' .. f .. ':deny'),
  redis.call('GET', slot .. ':' .. f .. ':shadow'),
  redis.call('HGET', slot .. ':@bans', f),
  redis.call('HGET', slot .. ':@state', f),
}
