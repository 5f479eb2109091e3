-- Free the write side whoever holds it (RReadWriteLock's write forceUnlock). Redisson
-- protocol §5.7.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  channel redisson_rwlock:{<raw>}
-- ARGV[1]  write unlock message, always "1" (wakes every waiter of each client)
-- ARGV[2]  how to tell waiters: publish, spublish or both (see publish.lua)
--
-- Reply: 1 when the lock was in write mode and was deleted, with the writer's read holds
-- (and waiters were told); 0 otherwise (free, or in read mode: readers are left alone).
if redis.call('hget', KEYS[1], 'mode') == 'write' then
    notify_before_writing(ARGV[2], KEYS[2], ARGV[1])
    -- The one write, after the message: refused, it leaves the waiters told in vain.
    first_write('releasing the lock', 'del', KEYS[1])
    return 1
end
return 0
