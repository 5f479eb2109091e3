-- Shared by the fair lock's scripts (see src/script.rs): its waiting list `queue`
-- redisson_lock_queue:{<raw>} (owner fields, head = next in line) and the waiters'
-- deadlines `deadlines` redisson_lock_timeout:{<raw>} (zset, score = epoch ms).

-- Waiters at the head whose deadline passed (by `now`, epoch ms) stopped asking: they are
-- dropped, so that the lock and its unlock message go to a live one. Only heads go; the first
-- head without a passed deadline (or without one at all) ends them. Redisson protocol §4.2.

-- Finds, without writing, the first waiter in line whose deadline has not passed (nil when
-- there is none) and how many stale heads stand before it.
local function live_head(queue, deadlines, now)
    local stale = 0
    while true do
        local head = redis.call('lindex', queue, stale)
        if not head then
            return nil, stale
        end
        local deadline = redis.call('zscore', deadlines, head)
        if not deadline or tonumber(deadline) > now then
            return head, stale
        end
        stale = stale + 1
    end
end

-- Drops the first `count` waiters in line (found stale by live_head).
local function drop_heads(queue, deadlines, count)
    for _ = 1, count do
        redis.call('zrem', deadlines, redis.call('lpop', queue))
    end
end

-- Drops the stale heads, a change that stands on its own (whatever the script does next);
-- `needs` names what the script does, should the server refuse it.
local function purge_stale_heads(queue, deadlines, now, needs)
    local _, stale = live_head(queue, deadlines, now)
    if stale > 0 then
        permit(needs, 'lpop', queue)
        permit(needs, 'zrem', deadlines, '')
        drop_heads(queue, deadlines, stale)
    end
end

-- How far the deadlines of `movers` (waiters in line order, the first right behind the owner
-- whose deadline is `ahead`) move up when the owner leaves the line: by the owner's `wait`
-- (what it added to the deadlines behind it), as Java moves them, but never by more than any
-- mover's gap to the one before it. That gap is the mover's own wait, and a live waiter looks
-- again by then: a waiter with a shorter wait than the owner's (a Java client with other
-- settings) is never moved past its next look, so no purge drops it unwoken. With equal waits
-- the gaps are the wait, and the move is Java's.
local function move_up_by(deadlines, movers, ahead, wait)
    local move = wait
    local before = ahead and tonumber(ahead)
    for _, waiter in ipairs(movers) do
        local deadline = redis.call('zscore', deadlines, waiter)
        if deadline then
            deadline = tonumber(deadline)
            if before then
                move = math.min(move, deadline - before)
            end
            before = deadline
        end
    end
    return math.max(move, 0)
end

-- Takes `owner`, whose deadline was `ahead`, out of the deadlines once it has left the head of
-- the line. The deadlines are chained (each one is the previous one plus that waiter's wait):
-- the owner's link is gone, so every remaining deadline moves up by its `wait`, or less (see
-- move_up_by).
local function close_gap(deadlines, owner, ahead, wait)
    redis.call('zrem', deadlines, owner)
    local movers = redis.call('zrange', deadlines, 0, -1)
    local move = move_up_by(deadlines, movers, ahead, wait)
    for _, waiter in ipairs(movers) do
        redis.call('zincrby', deadlines, -move, waiter)
    end
end
