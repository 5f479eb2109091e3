-- Sets the total permits, free and held (Redisson's permit-expirable setPermits, 3.19.1+,
-- protocol §15.2; no reap first): a missing counter is set to it; otherwise the counter moves
-- by the difference (it may go below 0 while permits are held). Tells the waiters the
-- target, as Java, when it changed anything.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  leases {<raw>}:timeout
-- KEYS[3]  channel redisson_sc:{<raw>}
-- ARGV[1]  the total, 0 or more
-- ARGV[2]  how to tell waiters: publish, spublish or both
--
-- Reply: the free permits after.
local needs = 'setting the permits'
local target = tonumber(ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    permit(needs, 'set', KEYS[1], ARGV[1])
    notify_before_writing(ARGV[2], KEYS[3], ARGV[1], needs)
    first_write(needs, 'set', KEYS[1], ARGV[1])
    return target
end
local free = permits_of(KEYS[1])
local total = free + redis.call('zcard', KEYS[2])
if total == target then
    return free
end
within_range(KEYS[1], free + target - total)
permit(needs, 'incrby', KEYS[1], '1')
notify_before_writing(ARGV[2], KEYS[3], ARGV[1], needs)
first_write(needs, 'incrby', KEYS[1], decimal(target - total))
return free + target - total
