-- Release one read hold, with Redisson's unlock latch. Redisson protocol §5.3 (3.44.0+).
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  channel redisson_rwlock:{<raw>}
-- KEYS[3]  key prefix every reader's timeout prefix starts with: {<raw>}, or <raw> when it
--          has a '{'; reader <f>'s hold #i is <key prefix>:<f>:rwlock_timeout:<i> (Java
--          passes this owner's timeout prefix as well, as KEYS[3])
-- KEYS[4]  unlock latch redisson_unlock_latch:{<raw>}:<id>
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  owner field <client uuid>:<owner id>
-- ARGV[3]  how to tell waiters: publish, spublish or both (see publish.lua)
-- ARGV[4]  latch TTL in ms
-- ARGV[5]  request id of this release, the same for every send of it
--
-- Reply: nil when the owner holds no read hold; 0 when the lock is still held (by this
--        owner's other holds, other readers, or the writer), its TTL then the longest live
--        reader's; 1 when the lock was freed and the message published.
-- A retry with the same request id replays the first reply from the latch.
--
-- Readers whose every timeout key expired are dead: when no live reader is left (and no
-- writer), the whole lock is deleted, as Java does. This is why every client must renew its
-- readers' timeout keys.
--
-- The TTL without a full scan. Java recomputes the TTL on every release: one PTTL per
-- remaining hold of every reader, so a release costs more the more readers hold the lock.
-- In read mode the hash never expires after its latest reader's timeout key. An acquire that
-- gives the hash its lease (the first reader, or one whose lease outlasts the hash's TTL) sets
-- the hash's TTL before the key's, so that the key ends with the hash or, as Redis's clock
-- moves while a script runs, a millisecond after it. A renewal likewise extends the hash
-- before the renewed keys (never shortening any), and a recompute sets the latest, reading
-- the server's clock once (instant.lua). A hash that ended after its latest key would make that key's release look
-- like an earlier reader's, and skip the purge of dead readers. (A recompute's instant is read
-- before the keys' TTLs, so it never ends after the latest key.) So a recompute cannot change
-- the TTL while another live hold's key expires no sooner than the hash; the TTL then stays as
-- it is (reply 0), which is found in one of two ways:
-- * the released hold's own key expires strictly before the hash: another hold's key
--   expires with the hash or after it, and nothing is scanned (the common case with many
--   readers);
-- * otherwise (it was the latest, or tied with it) the scan stops at the first remaining
--   key that lives as long as the hash. Readers that joined last come last in HKEYS while
--   the hash is small, so the scan goes backwards, reading each count only when it gets
--   there (far cheaper than HGETALL when it stops at once, the usual case for a tie).
-- The released key's PTTL is read before the hash's, and the hash's before the others', so a
-- clock that moves between two reads can only make the scan go on. A hash without a TTL, and
-- write mode (a writer that also reads), always scan in full, as Java does.
--
-- Deliberate difference from Java: where the hash's expiry is not its latest reader's, a
-- full scan would have moved it. Java's renewal can set the hash below a reader holding a
-- longer fixed lease, a writer that downgrades leaves its own TTL, and Java's
-- scripts set TTLs by PEXPIRE, one after the other (a hash can end a millisecond after the
-- key Java gave the same lease); a full scan
-- would raise the TTL to that reader's key, or lower it to the latest live key, or delete
-- the lock when every other reader is dead. Here the TTL stays as it was until a release
-- that scans in full, or until it runs out. For exclusion this is harmless: the lock never
-- expires sooner than before the release, and it is never freed while a reader's key lives.
-- At worst dead readers keep writers out until the TTL the hash already had.
--
-- Deliberate difference from Java: when the lock has no mode at all (it expired or was
-- force-unlocked) Java publishes, writes the latch "1" and replies nil, so a retry would
-- replay 1; here the latch holds "none", which replays as nil. Other clients see the same.
local key, channel, key_prefix, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local message, owner, publish, latch_ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local invalid = invalid_ms(latch_ttl)
if invalid then
    return invalid
end
local request = ARGV[5]
local owner_prefix = timeout_prefix(key_prefix, owner)

-- What releasing hold #`held` of `owner` leaves, read before anything is written: 0 while
-- the lock stays held (with the hash's new expiry instant when its TTL must move), or 1 when
-- it is free after it (no other field but the mode, or in read mode only dead readers).
local function outcome_of(mode, held)
    -- Fields besides the mode and, when this was its last hold, this owner's.
    if tonumber(held) <= 1 and redis.call('hlen', key) <= 2 then
        return 1
    end
    local released_ttl = redis.call('pttl', owner_prefix .. ':' .. held)
    -- Only in read mode does the hash expire with its latest reader (see the header).
    local hash_ttl = -1
    if mode == 'read' then
        hash_ttl = redis.call('pttl', key)
    end
    if hash_ttl > 0 and released_ttl >= 0 and released_ttl < hash_ttl then
        return 0
    end
    -- Read before the keys' TTLs, so that the hash never ends after the longest of them.
    local scan_start = now_ms()
    local longest = -3
    local fields = redis.call('hkeys', key)
    for i = #fields, 1, -1 do
        local field = fields[i]
        local top = tonumber(redis.call('hget', key, field))
        if top and field == owner then
            top = top - 1 -- its hold #held is the one released
        end
        if top then
            local prefix = timeout_prefix(key_prefix, field)
            for n = top, 1, -1 do
                local remaining = redis.call('pttl', prefix .. ':' .. n)
                if hash_ttl > 0 and remaining >= hash_ttl then
                    return 0
                end
                longest = math.max(longest, remaining)
            end
        end
    end
    if longest > 0 then
        return 0, instant_after(scan_start, longest)
    end
    if mode == 'write' then
        return 0
    end
    return 1
end

-- The outcome is known before anything is written: it is recorded and the previous record
-- read in one command, and a release that frees the lock (or finds no lock) tells the
-- waiters first, so that a publish the server refuses leaves everything as it was. (A send
-- that only replays tells them again: they look, and find the lock as it is.)
local found = redis.call('hmget', key, 'mode', owner)
local mode, held = found[1], found[2]
local outcome, expiry = nil, nil
if tonumber(held) then
    outcome, expiry = outcome_of(mode, held)
end
-- The count's text names the released hold's timeout key (no number formatted in Lua).
local released = owner_prefix .. ':' .. tostring(held)
local needs = 'releasing the lock'
if outcome == 1 then
    permit(needs, 'del', key, released)
elseif outcome == 0 then
    if tonumber(held) <= 1 then
        permit(needs, 'hdel', key, owner)
    else
        permit(needs, 'hincrby', key, owner, '-1')
    end
    permit(needs, 'del', released)
    if expiry then
        permit(needs, 'pexpireat', key, expiry)
    end
end
local tell = not mode or outcome == 1
local replayed, reply =
    tell_and_claim(tell, publish, channel, message, latch, latch_ttl, request, outcome)
if replayed then
    return reply
end
if outcome == nil then
    return nil
end
if outcome == 1 then
    redis.call('del', key, released)
    return 1
end
if tonumber(held) <= 1 then
    redis.call('hdel', key, owner)
else
    redis.call('hincrby', key, owner, '-1')
end
redis.call('del', released)
if expiry then
    redis.call('pexpireat', key, expiry)
end
return 0
