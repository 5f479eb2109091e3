-- Write acquire (RReadWriteLock's write side). Redisson protocol §5.4, plus an upgrade check.
--
-- KEYS[1]  lock hash <raw> (field mode = read|write, one count field per holder)
-- ARGV[1]  lease in ms (the fixed lease, or the watchdog timeout)
-- ARGV[2]  the owner's write field <client uuid>:<owner id>:write
-- ARGV[3]  the owner's read field <client uuid>:<owner id>
--
-- Reply: {1, count} when the write hold was taken (count 1: a new hold; the TTL is set to
--        the lease) or re-entered (count > 1; the lease is ADDED to the remaining TTL, as
--        Java does); {0, -3} when the owner holds read holds but no write hold (upgrade
--        refused; nothing was written); otherwise {0, PTTL of the lock} (-1 when the key
--        has no TTL), and nothing was written. (Java's reply is nil / PTTL.)
--
-- Deliberate difference from Java (ARGV[3] exists for it): Java answers an owner that holds
-- only read holds with the PTTL, so its lock() waits for itself forever. Here that case is
-- told apart by -3, which no PTTL can be, and the caller fails at once. Writing nothing,
-- it is invisible to other clients.
--
-- Deliberate difference from Java: a hash under the name without a mode field is not a
-- read-write lock (another kind's hold, or foreign data). Java takes it and writes into it;
-- here it counts as held by someone else: the reply is {0, its PTTL}, and nothing is
-- written.
local key, lease, write_owner, read_owner = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local invalid = invalid_ms(lease)
if invalid then
    return invalid
end

local needs = 'acquiring the lock'
local mode, foreign = rw_mode(key)
if foreign then
    return {0, redis.call('pttl', key)}
end
if not mode then
    -- The second HSET (the first's command, on the same key) needs no asking.
    permit(needs, 'pexpire', key, lease)
    ttl_permitted(key, lease, needs)
    first_write(needs, 'hset', key, 'mode', 'write')
    redis.call('hset', key, write_owner, 1)
    redis.call('pexpire', key, lease)
    return {1, 1}
end
if mode == 'write' and redis.call('hexists', key, write_owner) == 1 then
    permit(needs, 'pexpire', key, lease)
    local count = first_write(needs, 'hincrby', key, write_owner, 1)
    local remaining = redis.call('pttl', key)
    redis.call('pexpire', key, remaining + tonumber(lease))
    return {1, count}
end
if redis.call('hexists', key, read_owner) == 1 then
    return {0, -3}
end
return {0, redis.call('pttl', key)}
