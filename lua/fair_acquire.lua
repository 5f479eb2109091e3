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
-- KEYS[4]  optional, with KEYS[5] and a last ARGV (this client's own, not Java's): the fence
--          redisson_lock_left:{<raw>}:<owner field>:<wait id> of a queued waiter, which its
--          exit sets (lua/fair_acquire_failed.lua)
-- KEYS[5]  the owner's trace redisson_lock_took:{<raw>}:<owner field>: the wait id of the
--          owner's last new hold, kept as long as that hold's lease
-- ARGV[#]  the waiter's wait id
--
-- A queued waiter may give up while an attempt of its is on the wire with its answer
-- unknown (a command timeout, a connection lost), and that attempt may still run. So an
-- attempt whose waiter has left (its fence is set) does nothing and replies {0, 0}; a new
-- hold records the wait that took it, so that the waiter's exit can undo it; and an attempt
-- that finds the owner holding by an earlier attempt of the same wait takes that hold as
-- its own (no second count): its reply is the one the earlier attempt's caller never saw.
--
-- Reply: {1, count} when the hold was taken (count 1: the lock was free and the owner is
--        next in line, or nobody waits; the TTL is set to the lease) or re-entered (count
--        > 1; the TTL is never shortened, see lock_acquire.lua). (Java's reply is nil.)
--        No-wait form: otherwise {0, PTTL of the lock}, and nothing was written.
--        Timed form: otherwise {0, estimate}: an estimate in ms of the wait ahead, which may
--        be 0 or negative: for an owner already queued, the holder's PTTL (at least 0; for
--        an owner behind another waiter, capped as below); for a new waiter, the time until
--        the last waiter's deadline (or the holder's PTTL when nobody waits).
-- A new waiter is appended to the list, with the deadline <that estimate> + now + wait.
--
-- Differences from Java, for an owner already queued (Java only replies the PTTL):
-- * First in line while another owner holds the lock, the owner keeps its deadline at
--   least <margin> = wait - min(wait / 4, 1000) beyond the holder's PTTL: when it is
--   closer, every deadline in the zset moves later by the same amount, so that the owner's
--   becomes now + PTTL + wait and the chain behind it (each deadline = the one before plus
--   that waiter's wait) keeps its steps. The owner looks again within the PTTL, so a waiter
--   that keeps asking is never purged, however long the hold lasts; when it takes the
--   lock, the next waiter's deadline is still at least that waiter's wait less the
--   tolerance away. A waiter that stops asking keeps the deadline of its last look and
--   is purged once that has passed while it is first in line, as in Java. The tolerance
--   (up to 1 s) only spares rewriting the zset for clock and latency jitter.
-- * Behind another waiter, a positive PTTL is capped by the time until the first waiter's
--   deadline less this owner's margin: the latest time a first waiter that keeps asking
--   (with the same wait) looks again, so the owner looks again before it can have become
--   first in line unwoken. Once that time has passed, the cap is the time until the first
--   waiter's deadline, when the purge can drop it: the unlock message goes to the first
--   waiter only, so if it is dead the others must not sleep until the old holder's lease
--   would have ended.
-- The data stays in Java's layout: the list, and absolute epoch-ms deadlines.
local key, queue, deadlines, fence, trace = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lease, owner, join = ARGV[1], ARGV[2], ARGV[5] == '1'
local invalid = invalid_ms(lease)
if invalid then
    return invalid
end
local wait, now = tonumber(ARGV[3]), tonumber(ARGV[4])
local wait_id = trace and ARGV[#ARGV]
local refuse_reentry = (#ARGV == 7 or not trace) and ARGV[6]

if fence and redis.call('exists', fence) == 1 then
    return {0, 0}
end

local needs = 'acquiring the lock'
purge_stale_heads(queue, deadlines, now, needs)

if redis.call('exists', key) == 0 then
    local head = redis.call('lindex', queue, 0)
    if not head or head == owner then
        -- Without a queue (nobody waits, no deadline left) its writes would change nothing.
        local queued = head or redis.call('exists', deadlines) == 1
        permit(needs, 'pexpire', key, lease)
        if trace then
            permit(needs, 'set', trace, wait_id, 'px', lease)
        end
        if queued then
            permit(needs, 'zrem', deadlines, owner)
            permit(needs, 'zincrby', deadlines, '0', owner)
            permit(needs, 'hset', key, owner, '1')
        end
        ttl_permitted(key, lease, needs)
        if queued then
            local ahead = redis.call('zscore', deadlines, owner)
            first_write(needs, 'lpop', queue)
            close_gap(deadlines, owner, ahead, wait)
            redis.call('hset', key, owner, 1)
        else
            first_write(needs, 'hset', key, owner, 1)
        end
        redis.call('pexpire', key, lease)
        if trace then
            redis.call('set', trace, wait_id, 'px', lease)
        end
        return {1, 1}
    end
end

if redis.call('hexists', key, owner) == 1 then
    if trace and redis.call('get', trace) == wait_id then
        extend(key, lease)
        return {1, tonumber(redis.call('hget', key, owner))}
    end
    if refuse_reentry then
        return redis.error_reply(refuse_reentry)
    end
    permit(needs, 'pexpire', key, lease)
    return {1, add_hold(key, owner, lease, false, needs)}
end

if not join then
    return {0, redis.call('pttl', key)}
end

local own_deadline = redis.call('zscore', deadlines, owner)
if own_deadline then
    local estimate = redis.call('pttl', key)
    local head = redis.call('lindex', queue, 0)
    local tolerance = math.min(math.floor(wait / 4), 1000)
    if head == owner and estimate ~= -2 then
        -- First in line and another owner holds the lock (a free lock was taken above).
        local shift = now + math.max(estimate, 0) + wait - tonumber(own_deadline)
        if shift > tolerance then
            -- Only ZINCRBY: a refusal comes at the first.
            for _, waiter in ipairs(redis.call('zrange', deadlines, 0, -1)) do
                redis.call('zincrby', deadlines, shift, waiter)
            end
        end
    elseif estimate > 0 and head then
        local head_deadline = redis.call('zscore', deadlines, head)
        if head_deadline then
            local until_purge = tonumber(head_deadline) - now
            local until_look = until_purge - (wait - tolerance)
            if until_look > 0 then
                estimate = math.min(estimate, until_look)
            else
                estimate = math.min(estimate, until_purge)
            end
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
permit(needs, 'rpush', queue, owner)
if first_write(needs, 'zadd', deadlines, estimate + wait + now, owner) == 1 then
    local pushed = redis.pcall('rpush', queue, owner)
    if type(pushed) == 'table' and pushed.err then
        -- Refused where the server could not be asked beforehand (see permit): no deadline
        -- is left without its place in line, where no purge would find it.
        redis.call('zrem', deadlines, owner)
        refuse('rpush', queue, needs, pushed.err)
    end
end
return {0, estimate}
