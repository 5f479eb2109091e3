-- Reentrant acquire (RLock, and the base of every hash-based lock). Redisson protocol §3.2.
--
-- KEYS[1]  lock hash <raw>
-- ARGV[1]  lease in ms (the fixed lease, or the watchdog timeout)
-- ARGV[2]  owner field <client uuid>:<owner id>
--
-- Reply: nil when the hold was taken or re-entered (the TTL is reset to the lease);
--        otherwise the integer PTTL of the current holder (-1 when the key has no TTL).
local key, lease, owner = KEYS[1], ARGV[1], ARGV[2]
if redis.call('exists', key) == 0 or redis.call('hexists', key, owner) == 1 then
    redis.call('hincrby', key, owner, 1)
    redis.call('pexpire', key, lease)
    return nil
end
return redis.call('pttl', key)
