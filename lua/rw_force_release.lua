-- Free one side of a read-write lock whoever holds it (RReadWriteLock's forceUnlock of its
-- read or of its write lock). Redisson protocol §5.7.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  channel redisson_rwlock:{<raw>}
-- ARGV[1]  unlock message: "0" for the read side; "1" for the write side (wakes every
--          waiter of each client)
-- ARGV[2]  how to tell waiters: publish, spublish or both (see publish.lua)
-- ARGV[3]  the side freed, the mode the lock must be in: read or write
--
-- Reply: 1 when the lock was in mode ARGV[3] and was deleted (and waiters were told): in
--        read mode the readers' timeout keys are left to expire, as Java does; in write mode
--        the writer's read holds go with it. 0 otherwise (free, or in the other mode, which
--        is left alone).
if redis.call('hget', KEYS[1], 'mode') == ARGV[3] then
    notify_before_writing(ARGV[2], KEYS[2], ARGV[1])
    -- The one write, after the message: refused, it leaves the waiters told in vain.
    first_write('releasing the lock', 'del', KEYS[1])
    return 1
end
return 0
