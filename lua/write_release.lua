-- Release one write hold, with Redisson's unlock latch. Redisson protocol §5.5 (3.44.0+).
-- Given an heir (a write waiter of the same client), a last release that would free the lock
-- gives it to the heir instead, in the same step and without a message: the hash then holds
-- the mode write and the heir's write field with count 1, the TTL the heir's lease, as if the
-- heir had acquired it the moment the holder released it.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  channel redisson_rwlock:{<raw>}
-- KEYS[3]  unlock latch redisson_unlock_latch:{<raw>}:<id>
-- ARGV[1]  write unlock message, always "1" (wakes every waiter of each client)
-- ARGV[2]  lease in ms that a partial release resets the TTL to (only ever lengthens it while
--          the owner also holds read holds)
-- ARGV[3]  the owner's write field <client uuid>:<owner id>:write (its read field is the
--          same without ":write")
-- ARGV[4]  how to tell waiters: publish, spublish or both (see publish.lua)
-- ARGV[5]  (only with an heir) the heir's write field <client uuid>:<owner id>:write
-- ARGV[6]  (only with an heir) the heir's lease in ms
-- ARGV[#-1] latch TTL in ms
-- ARGV[#]  request id of this release, the same for every send of it
--
-- Reply: nil when the owner holds no write hold; 0 when write holds remain (re-entered; the
--        TTL is reset as ARGV[2] says); 1 when the last write hold was released: the lock was
--        deleted and the message published, or, when the owner still has read holds
--        (downgrade), the mode became read; 2 when the lock went to the heir (never on a
--        downgrade: the owner's read holds stay, and exclude a writer).
-- A retry with the same request id replays the first reply from the latch.
--
-- Deliberate differences from Java:
-- * On a downgrade Java publishes nothing, so readers waiting behind the writer only look
--   again when their timer fires (the writer's TTL, renewed for as long as it holds a
--   watchdog lease). Here the message is published then too. To Java waiters it is an
--   ordinary write-unlock message: at worst one more attempt.
-- * When the lock has no mode at all (expired or force-unlocked) Java publishes, writes the
--   latch "1" and replies nil; here the latch holds "none", which replays as nil.
local key, channel, latch = KEYS[1], KEYS[2], KEYS[3]
local message, lease, write_owner, publish = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local latch_ttl, request = ARGV[#ARGV - 1], ARGV[#ARGV]
local heir, heir_lease = nil, nil
if #ARGV == 8 then
    heir, heir_lease = ARGV[5], ARGV[6]
end
local invalid = invalid_ms(lease, latch_ttl) or (heir and invalid_ms(heir_lease))
if invalid then
    return invalid
end

-- The outcome is known from the count before anything is written: it is recorded and the
-- previous record read in one command, and a release that frees the write side (or finds no
-- lock) tells the waiters first, so that a publish the server refuses leaves everything as
-- it was. (A send that only replays tells them again: they look, and find the lock as it is.)
local mode = redis.call('hget', key, 'mode')
local count = nil
if mode == 'write' then
    count = tonumber(redis.call('hget', key, write_owner))
end
local outcome = release_outcome(count)
local read_owner = string.sub(write_owner, 1, -#':write' - 1)
local downgrade = outcome == 1 and redis.call('hlen', key) ~= 2
if outcome == 1 and not downgrade and heir then
    outcome = HANDED_OVER
    permit('handing the lock over', 'del', key)
    permit('handing the lock over', 'hset', key, 'mode', 'write', heir, '1')
    permit('handing the lock over', 'pexpire', key, heir_lease)
elseif outcome == 0 then
    permit_drop_hold(key, write_owner, lease)
elseif downgrade then
    permit('releasing the lock', 'hdel', key, write_owner)
    permit('releasing the lock', 'hset', key, 'mode', 'read')
elseif outcome == 1 then
    permit('releasing the lock', 'del', key)
end
local tell = not mode or outcome == 1
local replayed, reply =
    tell_and_claim(tell, publish, channel, message, latch, latch_ttl, request, outcome)
if replayed then
    return reply
end
if outcome == 0 then
    -- Read holds the owner took while writing need the TTL they have: it may only grow.
    drop_hold(key, write_owner, lease, redis.call('hexists', key, read_owner) == 1)
elseif outcome == 1 then
    -- Only the mode and this field: the lock is free. Otherwise the owner's read holds stay.
    if downgrade then
        redis.call('hdel', key, write_owner)
        redis.call('hset', key, 'mode', 'read')
    else
        redis.call('del', key)
    end
elseif outcome == HANDED_OVER then
    redis.call('del', key)
    redis.call('hset', key, 'mode', 'write', heir, '1')
    redis.call('pexpire', key, heir_lease)
end
return outcome
