-- Reentrant acquire (RLock, and the base of every hash-based lock). Redisson protocol §3.2;
-- with ARGV[3], the non-reentrant acquire of §8.2.
--
-- KEYS[1]  lock hash <raw>
-- ARGV[1]  lease in ms (the fixed lease, or the watchdog timeout)
-- ARGV[2]  owner field <client uuid>:<owner id>
-- ARGV[3]  optional: the error message "NON_REENTRANT_REACQUIRE" (NonReentrantLock); when
--          given, a re-entry is refused with this error reply and nothing is written
--
-- Reply: {1, count} when the hold was taken (count 1: a new hold) or re-entered (count > 1);
--        {0, PTTL of the current holder} otherwise (-1 when the key has no TTL), and
--        nothing was written.
-- A new hold gets the lease as its TTL. A re-entry never shortens the TTL: the key must
-- outlive the owner's longest live hold (Java sets the TTL to the lease either way).
-- The reply is this crate's own (Java's is nil / PTTL, which cannot tell a new hold from a
-- re-entry); the data written is Java's.
local key, lease, owner, refuse_reentry = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local invalid = invalid_ms(lease)
if invalid then
    return invalid
end
local free, takes = free_or_held(key, owner)
if takes then
    if refuse_reentry and not free then
        return redis.error_reply(refuse_reentry)
    end
    local needs = 'acquiring the lock'
    permit(needs, 'pexpire', key, lease)
    return {1, add_hold(key, owner, lease, free, needs)}
end
return {0, redis.call('pttl', key)}
