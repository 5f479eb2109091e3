-- Shared snippet: the names of the read holds' timeout keys (Redisson protocol §5.1), written
-- once for every script that makes them.

-- Reader `field`'s timeout prefix, from the lock's key prefix ({<raw>}, or <raw> when it has
-- a '{'). The reader's hold #n keeps the key <prefix>:<n>.
local function timeout_prefix(key_prefix, field)
    return key_prefix .. ':' .. field .. ':rwlock_timeout'
end
