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
-- reader still holds it (the hash and the timeout keys #c..#1 of every listed reader with
-- count c now expire at one instant, the TTL from now), 0 when none does (the caller stops
-- renewing those readers and reports the loss). A key that is no longer a hash counts as
-- gone instead of failing the whole batch.
local expiry = instant_after(now_ms(), valid_ms(ARGV[1]))
local renewed = {}
local arg = 2
for i = 1, #KEYS, 2 do
    local key, key_prefix = KEYS[i], KEYS[i + 1]
    local count = tonumber(ARGV[arg])
    local is_hash = redis.call('type', key).ok == 'hash'
    local alive = false
    for j = arg + 1, arg + count do
        local owner = ARGV[j]
        local holds = is_hash and tonumber(redis.call('hget', key, owner))
        if holds and holds > 0 then
            alive = true
            local prefix = timeout_prefix(key_prefix, owner)
            for n = holds, 1, -1 do
                redis.call('pexpireat', prefix .. ':' .. n, expiry)
            end
        end
    end
    if alive then
        redis.call('pexpireat', key, expiry)
        renewed[#renewed + 1] = 1
    else
        renewed[#renewed + 1] = 0
    end
    arg = arg + count + 1
end
return renewed
