-- Fair acquire (RFairLock), both forms: the timed one of lock() and tryLock with a wait
-- (Redisson protocol §4.3), which joins the queue, and the no-wait one of tryLock() (§4.4),
-- which never does; with the stale-head purge of §4.2. With ARGV[6], the non-reentrant fair
-- acquire of §8.3. (Redisson sends the two forms as two scripts whose ARGV[3] and ARGV[4]
-- are swapped; only the data they write is shared, and it is the same.)
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  waiting list redisson_lock_queue:{<raw>} (owner fields, head = next in line)
-- KEYS[3]  waiter deadlines redisson_lock_timeout:{<raw>} (zset, score = epoch ms)
-- ARGV[1]  lease in ms (the fixed lease, or the watchdog timeout)
-- ARGV[2]  owner field <client uuid>:<owner id>
-- ARGV[3]  this waiter's wait in ms: how long it may stall the queue without being seen
-- ARGV[4]  now: the caller's wall clock in epoch ms
-- ARGV[5]  "1" to join the queue when the lock cannot be had (timed form), "0" not to
-- ARGV[6]  optional: the error message "NON_REENTRANT_REACQUIRE" (NonReentrantFairLock);
--          when given, a re-entry is refused with this error reply and nothing is written
--
-- Reply: {1, count} when the hold was taken (count 1: the lock was free and the owner is
--        next in line, or nobody waits; the TTL is set to the lease) or re-entered (count
--        > 1; the TTL is never shortened, see lock_acquire.lua). (Java's reply is nil.)
--        No-wait form: otherwise {0, PTTL of the lock}, and nothing was written.
--        Timed form: otherwise {0, estimate}: an estimate in ms of the wait ahead, which may
--        be 0 or negative: for an owner already queued, the holder's PTTL (at least 0); for
--        a new waiter, the time until the last waiter's deadline (or the holder's PTTL when
--        nobody waits).
-- A new waiter is appended to the list, with the deadline <that estimate> + now + wait.
-- A queued waiter's deadline is never refreshed here.
--
-- Difference from Java, in the reply only: for an owner already queued behind another
-- waiter, a positive PTTL is capped by the time until that first waiter's deadline. The
-- unlock message goes to the first waiter only; if it is dead, the others must look again
-- when its deadline passes (and the purge drops it), not when the old holder's lease would
-- have ended. The data written is Java's.
local key, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, join, refuse_reentry = valid_ms(ARGV[1]), ARGV[2], ARGV[5] == '1', ARGV[6]
local wait, now = tonumber(ARGV[3]), tonumber(ARGV[4])

purge_stale_heads(queue, deadlines, now)

if redis.call('exists', key) == 0 then
    local head = redis.call('lindex', queue, 0)
    if not head or head == owner then
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, owner)
        -- The deadlines are chained (each one is the previous one plus that waiter's wait):
        -- the owner's link is gone, so every remaining deadline moves up by its wait.
        for _, waiter in ipairs(redis.call('zrange', deadlines, 0, -1)) do
            redis.call('zincrby', deadlines, -wait, waiter)
        end
        redis.call('hset', key, owner, 1)
        redis.call('pexpire', key, lease)
        return {1, 1}
    end
end

if redis.call('hexists', key, owner) == 1 then
    if refuse_reentry then
        return redis.error_reply(refuse_reentry)
    end
    return {1, add_hold(key, owner, lease)}
end

if not join then
    return {0, redis.call('pttl', key)}
end

if redis.call('zscore', deadlines, owner) then
    local estimate = redis.call('pttl', key)
    local head = redis.call('lindex', queue, 0)
    if estimate > 0 and head and head ~= owner then
        local head_deadline = redis.call('zscore', deadlines, head)
        if head_deadline and tonumber(head_deadline) - now < estimate then
            estimate = tonumber(head_deadline) - now
        end
    end
    if estimate < 0 then
        estimate = 0
    end
    return {0, estimate}
end

local estimate
local last = redis.call('lindex', queue, -1)
local last_deadline = last and last ~= owner and redis.call('zscore', deadlines, last)
if last_deadline then
    estimate = tonumber(last_deadline) - now
else
    estimate = redis.call('pttl', key)
end
if redis.call('zadd', deadlines, estimate + wait + now, owner) == 1 then
    redis.call('rpush', queue, owner)
end
return {0, estimate}
