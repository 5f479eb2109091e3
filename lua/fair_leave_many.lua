-- Several waiters of one client give up together and leave the queue (RFairLock's
-- acquireFailed, protocol §4.5, for each of them at once), in one pass over the queue: a
-- crowd of departures costs one walk of the line per batch, not one per waiter.
--
-- KEYS[1]  waiting list redisson_lock_queue:{<raw>}
-- KEYS[2]  waiter deadlines redisson_lock_timeout:{<raw>} (zset, score = epoch ms)
-- KEYS[3]  lock hash <raw>
-- KEYS[4]  channel base redisson_lock__channel:{<raw>}; a waiter <w> is told on <base>:<w>
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  how to tell waiters: publish, spublish or both (see publish.lua)
-- ARGV[3], ARGV[4], ...  pairs: the owner field of a waiter that leaves, and its wait in ms
--
-- Reply: nil, always. The same as the leavers leaving one after the other, from the front
-- of the line to the back (see fair_acquire_failed.lua): each one's wait is taken off the
-- deadlines of every waiter behind it (never more than any gap between two deadlines from it
-- on, see move_up_by in fair_queue.lua). A leaver moved by one ahead of it moves its
-- followers the same way, so the gaps from it on are the ones read here: one pass from the
-- back finds every leaver's move. A waiter without a deadline keeps none; an owner that is
-- not queued changes nothing. When the first in line leaves and the lock is free, the new
-- first waiter is told, as an unlock would.
local queue, deadlines, key, channel_base = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local message, publish = ARGV[1], ARGV[2]
local leaving = {}
for i = 3, #ARGV, 2 do
    leaving[ARGV[i]] = tonumber(ARGV[i + 1])
end

local needs = 'leaving the queue'
local waiters = redis.call('lrange', queue, 0, -1)
local scores = {}
for i, waiter in ipairs(waiters) do
    local score = redis.call('zscore', deadlines, waiter)
    scores[i] = score and tonumber(score)
end
-- From the back: the smallest gap between two deadlines from each place on, and each
-- leaver's move.
local moves, smallest, next_deadline = {}, math.huge, nil
local first_leaver, next_head = nil, nil
for i = #waiters, 1, -1 do
    if scores[i] then
        if next_deadline then
            smallest = math.min(smallest, next_deadline - scores[i])
        end
    end
    local wait = leaving[waiters[i]]
    if wait then
        -- Moves only those behind it that have a deadline: none behind, nothing to move.
        moves[i] = next_deadline and math.max(math.min(wait, smallest), 0) or 0
        first_leaver = i
    end
    if scores[i] then
        next_deadline = scores[i]
    end
end
if not first_leaver then
    return nil
end
for _, waiter in ipairs(waiters) do
    if not leaving[waiter] then
        next_head = waiter
        break
    end
end
permit(needs, 'zincrby', deadlines, '0', waiters[first_leaver])
permit(needs, 'zrem', deadlines, waiters[first_leaver])
if next_head and leaving[waiters[1]] and redis.call('exists', key) == 0 then
    notify_before_writing(publish, channel_base .. ':' .. next_head, message, needs)
end
-- The places in line go first (see fair_acquire_failed.lua).
first_write(needs, 'lrem', queue, 0, waiters[first_leaver])
local moved = 0
for i = first_leaver, #waiters do
    local waiter = waiters[i]
    if leaving[waiter] then
        if i ~= first_leaver then
            redis.call('lrem', queue, 0, waiter)
        end
        redis.call('zrem', deadlines, waiter)
        moved = moved + moves[i]
    elseif scores[i] and moved > 0 then
        redis.call('zincrby', deadlines, -moved, waiter)
    end
end
return nil
