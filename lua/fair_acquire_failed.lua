-- A fair waiter gives up and leaves the queue (RFairLock's acquireFailed). Redisson
-- protocol §4.5. No purge here.
--
-- KEYS[1]  waiting list redisson_lock_queue:{<raw>}
-- KEYS[2]  waiter deadlines redisson_lock_timeout:{<raw>} (zset, score = epoch ms)
-- KEYS[3]  lock hash <raw>
-- KEYS[4]  channel base redisson_lock__channel:{<raw>}; a waiter <w> is told on <base>:<w>
-- ARGV[1]  owner field <client uuid>:<owner id> of the waiter that leaves
-- ARGV[2]  that waiter's wait in ms (what it added to the deadlines behind it)
-- ARGV[3]  unlock message, always "0"
-- ARGV[4]  how to tell waiters: publish, spublish or both (see publish.lua)
-- KEYS[5]  optional, with KEYS[6], ARGV[5] and ARGV[6] (this client's own): the waiter's fence
--          redisson_lock_left:{<raw>}:<owner field>:<wait id> (see lua/fair_acquire.lua)
-- KEYS[6]  the owner's trace redisson_lock_took:{<raw>}:<owner field>
-- ARGV[5]  the waiter's wait id
-- ARGV[6]  how long the fence stays, in ms: longer than an attempt can stay on the wire
--
-- Reply: nil, always. The deadline of every waiter behind the owner moves up by its wait,
-- or less (never by more than a waiter's gap to the one before it: see move_up_by in
-- fair_queue.lua); a waiter without a deadline is left without one. Then the owner is
-- removed from both the list and the zset. An owner that is not queued changes nothing.
--
-- Addition to Java (KEYS[3], KEYS[4], ARGV[3], ARGV[4] exist for it): when the owner was
-- first in line and the lock is free, the new first waiter is told on its own channel, as
-- an unlock would. Otherwise an unlock message sent to the owner just before it left is
-- lost, and the new first waiter sleeps until its timer. The extra "0" is an ordinary unlock
-- message to Java waiters: at worst one more attempt.
--
-- With the fence (a waiter of this client): first the fence is set, so that an attempt of the
-- waiter still on the wire does nothing when it runs. Then a hold that an earlier attempt of
-- the waiter took (the trace names its wait), whose answer the waiter never saw, is undone:
-- one hold fewer, and when that frees the lock, the first waiter is told.
local queue, deadlines, key, channel_base = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, wait, message, publish = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local fence, trace = KEYS[5], KEYS[6]

local needs = 'leaving the queue'
-- With the fence: whether an earlier attempt of this wait took a hold the waiter never
-- learned of, and whether undoing it frees the lock.
local took = fence and redis.call('get', trace) == ARGV[5]
local count = took and tonumber(redis.call('hget', key, owner))
local frees = count and count <= 1 and redis.call('hlen', key) == 1
local waiters = redis.call('lrange', queue, 0, -1)
-- Those behind the owner that have a deadline, and the first waiter once it has left.
local behind, next_head = {}, nil
local found = false
for _, waiter in ipairs(waiters) do
    if waiter ~= owner and not next_head then
        next_head = waiter
    end
    if found then
        if redis.call('zscore', deadlines, waiter) then
            behind[#behind + 1] = waiter
        end
    elseif waiter == owner then
        found = true
    end
end
if took then
    permit(needs, 'del', trace)
    if count then
        permit(needs, 'hincrby', key, owner, '-1')
        permit(needs, 'hdel', key, owner)
    end
end
if #behind > 0 then
    permit(needs, 'zincrby', deadlines, '0', owner)
end
permit(needs, 'zrem', deadlines, owner)
if fence then
    permit(needs, 'lrem', queue, 0, owner)
end
if next_head and (frees or (waiters[1] == owner and redis.call('exists', key) == 0)) then
    notify_before_writing(publish, channel_base .. ':' .. next_head, message, needs)
end
if fence then
    -- First the fence, so that an attempt of the waiter still on the wire does nothing when
    -- it runs; then the hold an earlier attempt took is undone.
    first_write(needs, 'set', fence, '1', 'px', ARGV[6])
    if took then
        redis.call('del', trace)
        if count then
            if count <= 1 then
                redis.call('hdel', key, owner)
            else
                redis.call('hincrby', key, owner, -1)
            end
        end
    end
    redis.call('lrem', queue, 0, owner)
else
    -- The place in line goes first: where the server could not be asked beforehand (see
    -- permit), a refusal then never leaves a waiter in line whose deadline is gone, which
    -- no purge would pass.
    first_write(needs, 'lrem', queue, 0, owner)
end
local move = move_up_by(deadlines, behind, redis.call('zscore', deadlines, owner), wait)
for _, waiter in ipairs(behind) do
    redis.call('zincrby', deadlines, -move, waiter)
end
redis.call('zrem', deadlines, owner)
return nil
