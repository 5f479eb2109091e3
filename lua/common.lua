-- Shared prologue, put in front of the scripts that set a TTL (see src/script.rs), so each
-- rule is written once.

-- A Lua script's writes stay when a later command fails, so every duration is checked
-- before anything is written: a whole number of milliseconds from 1 to 2^53 - 1 (the
-- largest a Lua number holds exactly, and far below what PEXPIRE refuses). Returns the error
-- reply for the first of `...` that is not one, else nil; the script returns it from its top
-- level (an error raised as a table reaches the client garbled on Redis 6.2).
local function invalid_ms(...)
    for i = 1, select('#', ...) do
        local text = select(i, ...)
        local ms = tonumber(text)
        if not ms or ms < 1 or ms > 9007199254740991 or ms % 1 ~= 0 then
            return redis.error_reply('ERR invalid duration in ms: ' .. tostring(text))
        end
    end
    return nil
end

-- Makes `key` live at least `ttl` ms (text) from now, never less than it already does. The
-- TTL is read before it is set, so Redis's clock moving in between only lengthens it.
local function extend(key, ttl)
    if redis.call('pttl', key) < tonumber(ttl) then
        redis.call('pexpire', key, ttl)
    end
end

-- One more hold of `owner` (a new hold, a re-entry, or a reader joining): the count grows
-- by one and the key lives at least `lease` ms from now, never less than before, since the
-- owner's other holds (or other readers) may need longer. `new_key`: the key did not exist,
-- so its TTL is set without reading it. Returns the new count.
-- The caller has asked for PEXPIRE (see permit.lua); `needs`, when given: this is the
-- script's first write. A new key's TTL is also tried before the key is made, where the
-- server could not be asked: a refusal must never leave a hold without a TTL.
local function add_hold(key, owner, lease, new_key, needs)
    local count
    if new_key then
        ttl_permitted(key, lease, needs or 'acquiring the lock')
    end
    if needs then
        count = first_write(needs, 'hincrby', key, owner, '1')
    else
        count = redis.call('hincrby', key, owner, '1')
    end
    if new_key then
        redis.call('pexpire', key, lease)
    else
        extend(key, lease)
    end
    return count
end

-- Whether `owner` may take a hold of the lock hash `key`: `free`, true when no key exists,
-- and `takes`, true when it is free or the owner already holds it (a re-entry).
local function free_or_held(key, owner)
    local free = redis.call('exists', key) == 0
    return free, free or redis.call('hexists', key, owner) == 1
end

-- The mode of the read-write lock hash `key`: 'read', 'write', or false when it does not
-- exist; and `foreign`, true for a key without a mode, which is no read-write lock (another
-- kind's hold, or foreign data) and counts as held by someone else.
local function rw_mode(key)
    local mode = redis.call('hget', key, 'mode')
    return mode or false, not mode and redis.call('exists', key) == 1
end
