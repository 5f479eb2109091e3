-- Free a lock whoever holds it (RLock, fenced lock, spin lock). Redisson protocol §3.6; for
-- the spin lock (§8.1) with an empty publish command, since its waiters poll.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  unlock channel redisson_lock__channel:{<raw>}
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  publish command, PUBLISH or SPUBLISH; empty to publish nothing (spin lock)
--
-- Reply: 1 when a hold was deleted (and waiters were told, unless ARGV[2] is empty), 0 when
--        the lock was free.
if redis.call('del', KEYS[1]) == 1 then
    if ARGV[2] ~= '' then
        redis.call(ARGV[2], KEYS[2], ARGV[1])
    end
    return 1
end
return 0
