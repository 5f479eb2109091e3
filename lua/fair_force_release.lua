-- Free a fair lock whoever holds it (RFairLock's forceUnlock). Redisson protocol §4.7, with
-- the stale-head purge of §4.2.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  waiting list redisson_lock_queue:{<raw>} (owner fields, head = next in line)
-- KEYS[3]  waiter deadlines redisson_lock_timeout:{<raw>} (zset, score = epoch ms)
-- KEYS[4]  channel base redisson_lock__channel:{<raw>}; the head <h> is told on <base>:<h>
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  now: the caller's wall clock in epoch ms
-- ARGV[3]  how to tell waiters: publish, spublish or both (see publish.lua)
--
-- Reply: 1 when a hold was deleted (and the head waiter, if any, was told); 0 when the
-- lock was free. The queue itself is left alone.
local key, queue, deadlines, channel_base = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local message, now, publish = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local needs = 'releasing the lock'
local held = redis.call('exists', key) == 1
if held then
    permit(needs, 'del', key)
    -- The live head, told before anything is written (see notify_before_writing).
    local head = live_head(queue, deadlines, now)
    if head then
        notify_before_writing(publish, channel_base .. ':' .. head, message)
    end
end
purge_stale_heads(queue, deadlines, now, needs)
if not held then
    return 0
end
redis.call('del', key)
return 1
