-- Release one hold (RLock, fenced lock), with Redisson's unlock latch. Redisson protocol §3.4.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  unlock channel redisson_lock__channel:{<raw>}
-- KEYS[3]  unlock latch redisson_unlock_latch:{<raw>}:<request id>
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  lease in ms that a partial release resets the TTL to
-- ARGV[3]  owner field <client uuid>:<owner id>
-- ARGV[4]  publish command, PUBLISH or SPUBLISH; empty to publish nothing (spin lock, §8.1)
-- ARGV[5]  latch TTL in ms
--
-- Reply: nil when the owner holds nothing (no latch is written);
--        0 when holds remain (re-entered); 1 when the lock was freed and the message published.
-- A retry with the same request id replays the first reply from the latch instead of
-- releasing a second time.
local key, channel, latch = KEYS[1], KEYS[2], KEYS[3]
local message, lease, owner, publish = ARGV[1], valid_ms(ARGV[2]), ARGV[3], ARGV[4]
local latch_ttl = valid_ms(ARGV[5])

local replayed = redis.call('get', latch)
if replayed then
    return tonumber(replayed)
end
if redis.call('hexists', key, owner) == 0 then
    return nil
end
if redis.call('hincrby', key, owner, -1) > 0 then
    redis.call('pexpire', key, lease)
    redis.call('set', latch, 0, 'px', latch_ttl)
    return 0
end
redis.call('del', key)
if publish ~= '' then
    redis.call(publish, channel, message)
end
redis.call('set', latch, 1, 'px', latch_ttl)
return 1
