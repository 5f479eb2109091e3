-- Free the read side whoever holds it (RReadWriteLock's read forceUnlock). Redisson
-- protocol §5.7.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  channel redisson_rwlock:{<raw>}
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  how to tell waiters: publish, spublish or both (see publish.lua)
--
-- Reply: 1 when the lock was in read mode and was deleted (and waiters were told); 0
-- otherwise (free, or held by a writer: a write hold is left alone). The readers' timeout
-- keys are left to expire, as Java does.
if redis.call('hget', KEYS[1], 'mode') == 'read' then
    notify_before_writing(ARGV[2], KEYS[2], ARGV[1])
    -- The one write, after the message: refused, it leaves the waiters told in vain.
    first_write('releasing the lock', 'del', KEYS[1])
    return 1
end
return 0
