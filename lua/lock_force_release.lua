-- Free a lock whoever holds it (RLock, fenced lock, spin lock). Redisson protocol §3.6; for
-- the spin lock (§8.1) with an empty publish command, since its waiters poll.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  unlock channel redisson_lock__channel:{<raw>}
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  how to tell waiters: publish, spublish or both; empty to tell no one (spin lock)
--
-- Reply: 1 when a hold was deleted (and waiters were told, unless ARGV[2] is empty), 0 when
--        the lock was free.
if redis.call('exists', KEYS[1]) == 1 then
    notify_before_writing(ARGV[2], KEYS[2], ARGV[1])
    -- The one write, after the message: refused, it leaves the waiters told in vain.
    first_write('releasing the lock', 'del', KEYS[1])
    return 1
end
return 0
