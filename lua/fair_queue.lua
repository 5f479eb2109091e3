-- Shared by the fair lock's scripts (see src/script.rs): its waiting list `queue`
-- redisson_lock_queue:{<raw>} (owner fields, head = next in line) and the waiters'
-- deadlines `deadlines` redisson_lock_timeout:{<raw>} (zset, score = epoch ms).

-- Waiters at the head whose deadline passed (by `now`, epoch ms) stopped asking: drop them,
-- so that the lock and its unlock message go to a live one. Only heads go; the first head
-- without a passed deadline (or without one at all) ends the purge. Redisson protocol §4.2.
local function purge_stale_heads(queue, deadlines, now)
    while true do
        local head = redis.call('lindex', queue, 0)
        if not head then
            return
        end
        local deadline = redis.call('zscore', deadlines, head)
        if not deadline or tonumber(deadline) > now then
            return
        end
        redis.call('zrem', deadlines, head)
        redis.call('lpop', queue)
    end
end

-- Only the first in line may take a free fair lock, so only it is told, on its own channel
-- <channel_base>:<head>; nobody is when the queue is empty.
local function tell_head(queue, channel_base, publish, message)
    local head = redis.call('lindex', queue, 0)
    if head then
        notify(publish, channel_base .. ':' .. head, message)
    end
end

-- The head that purge_stale_heads would leave, found without writing: the first waiter in
-- line whose deadline has not passed (or who has none); nil when there is none.
local function live_head(queue, deadlines, now)
    local at = 0
    while true do
        local head = redis.call('lindex', queue, at)
        if not head then
            return nil
        end
        local deadline = redis.call('zscore', deadlines, head)
        if not deadline or tonumber(deadline) > now then
            return head
        end
        at = at + 1
    end
end
