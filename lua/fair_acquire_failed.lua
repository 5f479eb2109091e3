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

local waiters = redis.call('lrange', queue, 0, -1)
local behind = false
for _, waiter in ipairs(waiters) do
    if behind then
        if redis.call('zscore', deadlines, waiter) then
            redis.call('zincrby', deadlines, -wait, waiter)
        end
    elseif waiter == owner then
        behind = true
    end
end
redis.call('zrem', deadlines, owner)
redis.call('lrem', queue, 0, owner)

if waiters[1] == owner and redis.call('exists', key) == 0 then
    tell_head(queue, channel_base, publish, message)
end
return nil
