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
--
-- Reply: nil, always. The deadline of every waiter behind the owner moves up by its wait
-- (a waiter without a deadline is left without one); then the owner is removed from both
-- the list and the zset. An owner that is not queued changes nothing.
--
-- Addition to Java (KEYS[3], KEYS[4], ARGV[3], ARGV[4] exist for it): when the owner was
-- first in line and the lock is free, the new first waiter is told on its own channel, as
-- an unlock would. Otherwise an unlock message sent to the owner just before it left is
-- lost, and the new first waiter sleeps until its timer. The extra "0" is an ordinary unlock
-- message to Java waiters: at worst one more attempt.
local queue, deadlines, key, channel_base = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, wait, message, publish = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]

local needs = 'leaving the queue'
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
if #behind > 0 then
    permit(needs, 'zincrby', deadlines, '0', owner)
end
permit(needs, 'zrem', deadlines, owner)
if waiters[1] == owner and next_head and redis.call('exists', key) == 0 then
    notify_before_writing(publish, channel_base .. ':' .. next_head, message, needs)
end
-- The place in line goes first: where the server could not be asked beforehand (see
-- permit), a refusal then never leaves a waiter in line whose deadline is gone, which no
-- purge would pass.
first_write(needs, 'lrem', queue, 0, owner)
for _, waiter in ipairs(behind) do
    redis.call('zincrby', deadlines, -wait, waiter)
end
redis.call('zrem', deadlines, owner)
return nil
