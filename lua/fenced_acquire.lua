-- Fenced acquire (RFencedLock): the reentrant acquire plus a fencing token taken in the
-- same step. Redisson protocol §7.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  token counter redisson_lock_token:{<raw>} (a plain integer string, no TTL)
-- ARGV[1]  lease in ms (the fixed lease, or the watchdog timeout)
-- ARGV[2]  owner field <client uuid>:<owner id>
--
-- Reply: {1, count, token} when the hold was taken (count 1: a new hold) or re-entered
--        (count > 1): the counter was incremented (every acquisition, re-entries included,
--        gets a new, larger token). Otherwise {0, PTTL of the current holder} (-1 when the
--        key has no TTL), and nothing was written.
-- A new hold gets the lease as its TTL; a re-entry never shortens the TTL (see
-- lock_acquire.lua).
-- This reply is this crate's own (Java reads {-1, token} / {PTTL, -1}, which cannot tell a
-- holder without TTL from a success); the data written is Java's. The counter is never
-- reset or deleted here or by any release.
local key, counter = KEYS[1], KEYS[2]
local lease, owner = ARGV[1], ARGV[2]
local invalid = invalid_ms(lease)
if invalid then
    return invalid
end
local free, takes = free_or_held(key, owner)
if takes then
    local needs = 'acquiring the lock'
    permit(needs, 'hincrby', key, owner, '1')
    permit(needs, 'pexpire', key, lease)
    if free then
        -- Tried before the token is taken (see add_hold).
        ttl_permitted(key, lease, needs)
    end
    local token = first_write(needs, 'incr', counter)
    return {1, add_hold(key, owner, lease, free), token}
end
return {0, redis.call('pttl', key)}
