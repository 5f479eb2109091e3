-- Shared snippet: a permit-expirable semaphore's leases (protocol §15.1): the ZSET
-- {<raw>}:timeout, one member per permit taken (its id as 16 raw bytes), scored by when its
-- lease ends in epoch ms by the acquirer's clock, or NEVER. Held permits are not in the
-- counter; an expired one goes back to it only when a script reaps it, as in Java.
local NEVER = 922337203685477

-- ZREM of `members` (a list), in slices that Lua's unpack can hold. Returns how many went.
local function zrem_all(leases, members)
    local removed = 0
    for first = 1, #members, 1000 do
        local last = math.min(first + 999, #members)
        removed = removed + redis.call('zrem', leases, unpack(members, first, last))
    end
    return removed
end

-- Gives the permits whose lease ended by `now` back to the counter, at most `limit` of them
-- (all when nil), and tells the waiters the new count when it is above 0 (Java's reap).
-- Returns how many. The writes are a whole of their own: a refusal after them leaves a
-- consistent semaphore.
local function reap(needs, counter, leases, channel, publish, now, limit)
    local expired
    if limit then
        expired = redis.call('zrangebyscore', leases, 0, now, 'limit', 0, limit)
    else
        expired = redis.call('zrangebyscore', leases, 0, now)
    end
    if #expired == 0 then
        return 0
    end
    local count = permits_of(counter) + #expired
    within_range(counter, count)
    permit(needs, 'incrby', counter, '1')
    if count > 0 then
        notify_before_writing(publish, channel, decimal(count), needs)
    end
    permit(needs, 'zrem', leases, expired[1])
    zrem_all(leases, expired)
    redis.call('incrby', counter, #expired)
    return #expired
end
