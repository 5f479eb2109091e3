-- Shared snippet: telling a lock's waiters that it may be free (protocol §9). `publish` is
-- what the client's pub/sub mode chose: 'publish', 'spublish', 'both' (to reach classic and
-- sharded listeners alike), or '' to tell no one (the spin lock).
local function notify(publish, channel, message)
    if publish == 'both' then
        redis.call('publish', channel, message)
        redis.call('spublish', channel, message)
    elseif publish ~= '' then
        redis.call(publish, channel, message)
    end
end

