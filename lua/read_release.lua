-- Release one read hold, with Redisson's unlock latch. Redisson protocol §5.3 (3.44.0+).
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  channel redisson_rwlock:{<raw>}
-- KEYS[3]  this reader's timeout prefix {<raw>}:<owner field>:rwlock_timeout
-- KEYS[4]  key prefix every reader's timeout prefix starts with: {<raw>}, or <raw> when it
--          has a '{'; reader <f>'s hold #i is <key prefix>:<f>:rwlock_timeout:<i>
-- KEYS[5]  unlock latch redisson_unlock_latch:{<raw>}:<id>
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  owner field <client uuid>:<owner id>
-- ARGV[3]  how to tell waiters: publish, spublish or both (see publish.lua)
-- ARGV[4]  latch TTL in ms
-- ARGV[5]  request id of this release, the same for every send of it
--
-- Reply: nil when the owner holds no read hold; 0 when the lock is still held (by this
--        owner's other holds, other readers, or the writer), its TTL then shrunk to the
--        longest live reader's; 1 when the lock was freed and the message published.
-- A retry with the same request id replays the first reply from the latch.
--
-- Readers whose every timeout key expired are dead: when no live reader is left (and no
-- writer), the whole lock is deleted, as Java does. This is why every client must renew its
-- readers' timeout keys.
--
-- Deliberate difference from Java: when the lock has no mode at all (it expired or was
-- force-unlocked) Java publishes, writes the latch "1" and replies nil, so a retry would
-- replay 1; here the latch holds "none", which replays as nil. Other clients see the same.
local key, channel, timeout_prefix, key_prefix, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local message, owner, publish, latch_ttl = ARGV[1], ARGV[2], ARGV[3], valid_ms(ARGV[4])
local request = ARGV[5]

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
if redis.call('hexists', key, owner) == 0 then
    return nil
end

local left = redis.call('hincrby', key, owner, -1)
if left == 0 then
    redis.call('hdel', key, owner)
end
redis.call('del', timeout_prefix .. ':' .. (left + 1))

if redis.call('hlen', key) > 1 then
    local longest = -3
    local fields = redis.call('hgetall', key)
    for i = 1, #fields, 2 do
        local count = tonumber(fields[i + 1])
        if count then
            for n = count, 1, -1 do
                local remaining = redis.call('pttl', key_prefix .. ':' .. fields[i] .. ':rwlock_timeout:' .. n)
                longest = math.max(longest, remaining)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', key, longest)
        return latch_record(latch, latch_ttl, request, 0)
    end
    if mode == 'write' then
        return latch_record(latch, latch_ttl, request, 0)
    end
end

redis.call('del', key)
notify(publish, channel, message)
return latch_record(latch, latch_ttl, request, 1)
