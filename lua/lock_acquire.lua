-- Reentrant acquire (RLock, and the base of every hash-based lock). Redisson protocol §3.2;
-- with ARGV[3], the non-reentrant acquire of §8.2.
--
-- KEYS[1]  lock hash <raw>
-- ARGV[1]  lease in ms (the fixed lease, or the watchdog timeout)
-- ARGV[2]  owner field <client uuid>:<owner id>
-- ARGV[3]  optional: the error message "NON_REENTRANT_REACQUIRE" (NonReentrantLock); when
--          given, a re-entry is refused with this error reply and nothing is written
--
-- Reply: nil when the hold was taken or re-entered (the TTL is reset to the lease);
--        otherwise the integer PTTL of the current holder (-1 when the key has no TTL).
local key, lease, owner, refuse_reentry = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local free = redis.call('exists', key) == 0
if free or redis.call('hexists', key, owner) == 1 then
    if refuse_reentry and not free then
        return redis.error_reply(refuse_reentry)
    end
    redis.call('hincrby', key, owner, 1)
    redis.call('pexpire', key, lease)
    return nil
end
return redis.call('pttl', key)
