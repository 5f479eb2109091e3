-- Release one spin-lock hold (RSpinLock), with Redisson's unlock latch. Redisson protocol
-- §8.1. Spin waiters poll, so nothing is published.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  unlock latch redisson_unlock_latch:{<raw>}:<request id>
-- ARGV[1]  lease in ms that a partial release resets the TTL to
-- ARGV[2]  owner field <client uuid>:<owner id>
-- ARGV[3]  latch TTL in ms
--
-- Reply: nil when the owner holds nothing (no latch is written);
--        0 when holds remain (re-entered); 1 when the lock was freed.
-- A retry with the same request id replays the first reply from the latch instead of
-- releasing a second time.
local key, latch = KEYS[1], KEYS[2]
local lease, owner, latch_ttl = valid_ms(ARGV[1]), ARGV[2], valid_ms(ARGV[3])

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
redis.call('set', latch, 1, 'px', latch_ttl)
return 1
