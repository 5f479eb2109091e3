-- Shared snippet: instants on the server's clock, for the read-write lock, whose hash must
-- never expire after its latest reader's timeout key (see read_release.lua). Redis's clock
-- moves while a script runs, so two PEXPIREs of the same length in one script can end a
-- millisecond apart; a script that sets many keys reads the clock once and sets PEXPIREAT /
-- PXAT.

-- The server's clock now, in whole ms.
local function now_ms()
    local time = redis.call('time')
    return time[1] * 1000 + math.floor(time[2] / 1000)
end

-- The instant `ms` (text or number) from `now`, as the text PEXPIREAT and PXAT take.
local function instant_after(now, ms)
    return string.format('%d', now + tonumber(ms))
end
