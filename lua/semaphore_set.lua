-- Sets a semaphore's permits unless it has a counter already (Redisson's trySetPermits,
-- protocol §13.2), and tells its waiters the new count.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_sc:{<raw>}
-- ARGV[1]  permits, 0 or more, in decimal
-- ARGV[2]  how to tell waiters: publish, spublish or both
-- ARGV[3]  optional: the counter's TTL in ms, 1 or more (Redisson 3.29's trySetPermits(n, ttl))
--
-- Reply: 1 when the counter was set (and waiters told), 0 when it existed: nothing changed.
if redis.call('exists', KEYS[1]) == 1 then
    -- A key of another type is refused (WRONGTYPE), not taken for a counter already set.
    redis.call('get', KEYS[1])
    return 0
end
local needs = 'setting the permits'
local set = {KEYS[1], ARGV[1]}
if ARGV[3] then
    set = {KEYS[1], ARGV[1], 'px', ARGV[3]}
end
permit(needs, 'set', unpack(set))
notify_before_writing(ARGV[2], KEYS[2], ARGV[1], needs)
first_write(needs, 'set', unpack(set))
return 1
