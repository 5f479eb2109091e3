-- Watchdog renewal of many read holds in one call. Redisson protocol §5.6 (4.4.0+ form:
-- only this client's own readers' timeout keys are renewed). Every key of one call lives in
-- the same cluster slot.
--
-- KEYS[2i-1]  lock hash of lock i
-- KEYS[2i]    key prefix of lock i: {<raw>}, or <raw> when it has a '{'
-- ARGV[1]     new TTL in ms (the watchdog timeout)
-- ARGV[2..]   for each lock in KEYS order: the count m, then m owner fields
--             <client uuid>:<owner id> of this client's readers of that lock
--
-- Reply: an array with one integer per lock, in KEYS order: 1 when at least one listed
-- reader still holds it (the hash, then the timeout keys #c..#1 of every listed reader with
-- count c, now live at least the TTL from now), 0 when none does (the caller stops renewing
-- those readers and reports the loss). A key that is no longer a hash counts as gone instead
-- of failing the whole batch.
-- A renewal never shortens a TTL: another reader, or this owner's own read or write hold,
-- may hold the lock with a longer fixed lease, and the hash must outlive every reader's key.
-- The hash is extended before the keys, so that it never ends after the latest of them
-- (see read_release.lua). (Java sets every TTL to the new one.)
local ttl = ARGV[1]
local invalid = invalid_ms(ttl)
if invalid then
    return invalid
end
local renewed = {}
local arg = 2
for i = 1, #KEYS, 2 do
    local key, key_prefix = KEYS[i], KEYS[i + 1]
    local count = tonumber(ARGV[arg])
    local is_hash = redis.call('type', key).ok == 'hash'
    -- The listed readers that still hold it, with their counts.
    local alive = {}
    for j = arg + 1, arg + count do
        local holds = is_hash and tonumber(redis.call('hget', key, ARGV[j]))
        if holds and holds > 0 then
            alive[#alive + 1] = {ARGV[j], holds}
        end
    end
    if #alive > 0 then
        extend(key, ttl)
        for _, reader in ipairs(alive) do
            local prefix = timeout_prefix(key_prefix, reader[1])
            for n = reader[2], 1, -1 do
                extend(prefix .. ':' .. n, ttl)
            end
        end
        renewed[#renewed + 1] = 1
    else
        renewed[#renewed + 1] = 0
    end
    arg = arg + count + 1
end
return renewed
