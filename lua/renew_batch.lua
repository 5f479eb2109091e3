-- Watchdog renewal of many holds in one call. Redisson protocol §3.7 (batched form).
-- Every key of one call lives in the same cluster slot.
--
-- KEYS[i]    lock hash of hold i
-- ARGV[1]    new TTL in ms (the watchdog timeout)
-- ARGV[i+1]  owner field of hold i
--
-- Reply: an array with one integer per key, in KEYS order: 1 when the hold still exists and
-- its key lives at least the TTL from now, 0 when it is gone (the caller stops renewing it
-- and reports the loss). A key that is no longer a hash counts as gone instead of failing the
-- whole batch.
-- A renewal never shortens the TTL: the owner may also hold the lock with a longer fixed
-- lease. (Java sets the TTL either way.)
local ttl = ARGV[1]
local invalid = invalid_ms(ttl)
if invalid then
    return invalid
end
local renewed = {}
for i, key in ipairs(KEYS) do
    local owner = ARGV[i + 1]
    -- pcall: a key that is no longer a hash answers with an error table, not 1.
    if redis.pcall('hexists', key, owner) == 1 then
        extend(key, ttl)
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
