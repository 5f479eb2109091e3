-- Release one write hold, with Redisson's unlock latch. Redisson protocol §5.5 (3.44.0+).
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  channel redisson_rwlock:{<raw>}
-- KEYS[3]  unlock latch redisson_unlock_latch:{<raw>}:<id>
-- ARGV[1]  write unlock message, always "1" (wakes every waiter of each client)
-- ARGV[2]  lease in ms that a partial release resets the TTL to
-- ARGV[3]  the owner's write field <client uuid>:<owner id>:write
-- ARGV[4]  how to tell waiters: publish, spublish or both (see publish.lua)
-- ARGV[5]  latch TTL in ms
-- ARGV[6]  request id of this release, the same for every send of it
--
-- Reply: nil when the owner holds no write hold; 0 when write holds remain (re-entered; the
--        TTL is reset to the lease); 1 when the last write hold was released: the lock was
--        deleted and the message published, or, when the owner still has read holds
--        (downgrade), the mode became read.
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
local message, lease, write_owner, publish = ARGV[1], valid_ms(ARGV[2]), ARGV[3], ARGV[4]
local latch_ttl = valid_ms(ARGV[5])
local request = ARGV[6]

check_may_publish(publish, channel, message)
local replayed, reply = latch_replay(latch, request)
if replayed then
    return reply
end

local mode = redis.call('hget', key, 'mode')
if not mode then
    notify(publish, channel, message)
    return latch_record(latch, latch_ttl, request, nil)
end
if mode ~= 'write' or redis.call('hexists', key, write_owner) == 0 then
    return nil
end
if drop_hold(key, write_owner, lease) > 0 then
    return latch_record(latch, latch_ttl, request, 0)
end
redis.call('hdel', key, write_owner)
if redis.call('hlen', key) == 1 then
    redis.call('del', key)
else
    redis.call('hset', key, 'mode', 'read')
end
notify(publish, channel, message)
return latch_record(latch, latch_ttl, request, 1)
