-- Fair acquire, no-wait form (RFairLock: tryLock() without a wait). Redisson protocol §4.4,
-- with the stale-head purge of §4.2. It never joins the queue. With ARGV[5], the
-- non-reentrant fair acquire of §8.3.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  waiting list redisson_lock_queue:{<raw>} (owner fields, head = next in line)
-- KEYS[3]  waiter deadlines redisson_lock_timeout:{<raw>} (zset, score = epoch ms)
-- ARGV[1]  lease in ms (the fixed lease, or the watchdog timeout)
-- ARGV[2]  owner field <client uuid>:<owner id>
-- ARGV[3]  now: the caller's wall clock in epoch ms      (note: the order of ARGV[3] and
-- ARGV[4]  the wait in ms of the client's fair waiters    ARGV[4] differs from fair_acquire)
-- ARGV[5]  optional: the error message "NON_REENTRANT_REACQUIRE" (NonReentrantFairLock);
--          when given, a re-entry is refused with this error reply and nothing is written
--
-- Reply: nil when the hold was taken (the lock was free and the owner is next in line, or
--        nobody waits) or re-entered; the TTL is then set to the lease. Otherwise 1, and
--        nothing was written.
local key, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, refuse_reentry = ARGV[1], ARGV[2], ARGV[5]
local now, wait = tonumber(ARGV[3]), tonumber(ARGV[4])

-- Waiters at the head whose deadline passed stopped asking: drop them. Only heads go;
-- the first head without a passed deadline (or without one at all) ends the purge.
while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
        break
    end
    local deadline = redis.call('zscore', deadlines, head)
    if not deadline or tonumber(deadline) > now then
        break
    end
    redis.call('zrem', deadlines, head)
    redis.call('lpop', queue)
end

if redis.call('exists', key) == 0 then
    local head = redis.call('lindex', queue, 0)
    if not head or head == owner then
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, owner)
        -- The deadlines are chained: the owner's link is gone, so every remaining deadline
        -- moves up by the wait.
        for _, waiter in ipairs(redis.call('zrange', deadlines, 0, -1)) do
            redis.call('zincrby', deadlines, -wait, waiter)
        end
        redis.call('hset', key, owner, 1)
        redis.call('pexpire', key, lease)
        return nil
    end
end

if redis.call('hexists', key, owner) == 1 then
    if refuse_reentry then
        return redis.error_reply(refuse_reentry)
    end
    redis.call('hincrby', key, owner, 1)
    redis.call('pexpire', key, lease)
    return nil
end
return 1
