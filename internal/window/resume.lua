-- where a partition resumes: its checkpoint offset (a write-back owner's
-- counts are in Redis up to it), else its offset (a write-through owner's)
return redis.call('GET', KEYS[2]) or redis.call('GET', KEYS[1])
