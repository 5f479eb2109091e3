-- Read acquire (RReadWriteLock's read side). Redisson protocol §5.2.
--
-- KEYS[1]  lock hash <raw> (field mode = read|write, one count field per holder)
-- KEYS[2]  key prefix every reader's timeout prefix starts with: {<raw>}, or <raw> when it
--          has a '{'. This reader's timeout prefix is <key prefix>:<owner field>:rwlock_timeout
--          (Java passes it as KEYS[2]); hold #n keeps the string <prefix>:<n> = "1" with PX =
--          that hold's lease
-- ARGV[1]  lease in ms (the fixed lease, or the watchdog timeout)
-- ARGV[2]  owner field <client uuid>:<owner id>
--
-- Reply: {1, count} when the read hold was taken (count 1: the owner's first read hold) or
--        re-entered (count > 1); otherwise {0, PTTL of the lock} (-1 when the key has no
--        TTL), and nothing was written. (Java's reply is nil / PTTL.)
-- A read hold is granted when the lock is free, in read mode (readers never queue behind
-- waiting writers), or in write mode held by this same owner (downgrade; mode stays write).
-- The hash TTL becomes the larger of its current TTL and the lease, never shorter.
--
-- Deliberate difference from Java: a hash under the name without a mode field is not a
-- read-write lock (another kind's hold, or foreign data). Java takes it and writes into it;
-- here it counts as held by someone else: the reply is {0, its PTTL}, and nothing is
-- written.
local key, lease, owner = KEYS[1], ARGV[1], ARGV[2]
local invalid = invalid_ms(lease)
if invalid then
    return invalid
end
local owner_prefix = timeout_prefix(KEYS[2], owner)

-- A new hold's key gets its lease after the hash got its TTL: Redis's clock moves while a
-- script runs, so the key may end a millisecond after the hash, never before it. The hash
-- then never ends after its latest reader's key, which read_release.lua relies on.
-- The writes after the first are asked for before it (see permit.lua).
local needs = 'acquiring the lock'
local mode, foreign = rw_mode(key)
if foreign then
    return {0, redis.call('pttl', key)}
end
if not mode then
    local timeout_key = owner_prefix .. ':1'
    permit(needs, 'pexpire', key, lease)
    permit(needs, 'set', timeout_key, '1', 'px', lease)
    ttl_permitted(key, lease, needs)
    first_write(needs, 'hset', key, 'mode', 'read', owner, 1)
    redis.call('pexpire', key, lease)
    redis.call('set', timeout_key, 1, 'px', lease)
    return {1, 1}
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', key, owner .. ':write') == 1) then
    -- The hold's number, to name its timeout key before anything is written.
    local n = tostring(tonumber(redis.call('hget', key, owner) or '0') + 1)
    local timeout_key = owner_prefix .. ':' .. n
    permit(needs, 'pexpire', key, lease)
    permit(needs, 'set', timeout_key, '1', 'px', lease)
    n = add_hold(key, owner, lease, false, needs)
    redis.call('set', timeout_key, 1, 'px', lease)
    return {1, n}
end
return {0, redis.call('pttl', key)}
