-- Counts a permit-expirable semaphore's permits after reaping every expired one (Redisson's
-- availablePermits, acquiredPermits, getPermits, protocol §15.2): a write, as in Java.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  leases {<raw>}:timeout
-- KEYS[3]  channel redisson_sc:{<raw>}
-- ARGV[1]  now, epoch ms by the caller's clock
-- ARGV[2]  how to tell waiters: publish, spublish or both
-- ARGV[3]  what to count: 'available' (the counter), 'acquired' (the leases) or 'permits'
--          (both; 0 when the counter is missing)
--
-- Reply: the count.
reap('counting permits', KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], nil)
if ARGV[3] == 'available' then
    return permits_of(KEYS[1])
end
local held = redis.call('zcard', KEYS[2])
if ARGV[3] == 'acquired' then
    return held
end
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
return permits_of(KEYS[1]) + held
