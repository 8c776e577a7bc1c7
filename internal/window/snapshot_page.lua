return redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
