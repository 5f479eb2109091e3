-- Shared snippet: a count-down latch's counter (protocol §14.1): a STRING holding the count
-- in decimal, a missing key being an open latch. GET fails on a key of another type before
-- anything is written.

-- The count of the latch `key`, or nil when it is missing; fails on a value that is not a
-- decimal integer (DECR, which Java runs, would fail on it too), or one beyond 2^53 - 1
-- either way, which Lua's numbers cannot count exactly.
local function count_of(key)
    local value = redis.call('get', key)
    if value == false then
        return nil
    end
    if not value:find('^%-?%d+$') then
        error({err = 'ERR the count-down latch ' .. key .. ' holds ' .. value
            .. ', not a whole number; nothing was written'})
    end
    local count = tonumber(value)
    if count > 9007199254740991 or count < -9007199254740991 then
        error({err = 'ERR the count-down latch ' .. key .. ' holds ' .. value
            .. ', a whole number beyond 2^53 - 1 either way; nothing was written'})
    end
    return count
end
