-- Shared snippet: a semaphore's counter (protocol §13.1): a STRING holding the
-- free permits in decimal, a missing key counting as 0. Lua numbers are doubles, so counts
-- are kept within what they hold exactly.
local MAX_PERMITS = 9007199254740991

-- `count` in decimal, as Java writes and reads it.
local function decimal(count)
    return string.format('%d', count)
end

-- The free permits of the counter `key`; fails on a value that is not a whole number.
local function permits_of(key)
    local value = redis.call('get', key)
    if value == false then
        return 0
    end
    local count = tonumber(value)
    if count == nil or count ~= math.floor(count) or count > MAX_PERMITS or count < -MAX_PERMITS then
        error({err = 'ERR the semaphore counter ' .. key .. ' holds ' .. value
            .. ', not a whole number of permits; nothing was written'})
    end
    return count
end

-- Fails unless the counter `key` can hold `count` permits.
local function within_range(key, count)
    if count > MAX_PERMITS or count < -MAX_PERMITS then
        error({err = 'ERR the semaphore ' .. key .. ' would hold ' .. string.format('%.0f', count)
            .. ' permits, beyond ' .. decimal(MAX_PERMITS) .. ' either way; nothing was written'})
    end
end
