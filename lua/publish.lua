-- Shared snippet: telling a lock's waiters that it may be free (protocol §9). `publish` is
-- what the client's pub/sub mode chose: 'publish', 'spublish', 'both' (to reach classic and
-- sharded listeners alike), or '' to tell no one (the spin lock).
-- A server without SPUBLISH (older than 7.0, say a node that joined a cluster after the
-- client probed it) must not fail a release after its writes: SPUBLISH is tried with
-- redis.pcall, and PUBLISH sent in its place.
local function notify(publish, channel, message)
    if publish == '' then
        return
    end
    if publish ~= 'spublish' then
        redis.call('publish', channel, message)
    end
    if publish ~= 'publish' then
        local sent = redis.pcall('spublish', channel, message)
        if type(sent) == 'table' and sent.err and publish == 'spublish' then
            redis.call('publish', channel, message)
        end
    end
end

-- A release that publishes must be allowed to: a publish refused by the user's ACL would
-- fail the script after it has written (the hold gone, the waiters never told). So it is
-- refused first, with nothing written. (Scripts can ask the ACL from Redis 7.0 on; the
-- check uses the lock's channel, so channel rules must allow the waiters' channels too.)
local function check_may_publish(publish, channel, message)
    if publish == '' or not redis.acl_check_cmd then
        return
    end
    local commands = {publish}
    if publish == 'both' then
        commands = {'publish', 'spublish'}
    end
    for _, command in ipairs(commands) do
        local known, allowed = pcall(redis.acl_check_cmd, command, channel, message)
        if not known and command == 'spublish' then
            -- The server lacks SPUBLISH: notify publishes with PUBLISH instead.
            command = 'publish'
            known, allowed = pcall(redis.acl_check_cmd, command, channel, message)
        end
        if known and not allowed then
            error({err = 'NOPERM this user may not run ' .. command .. ' on ' .. channel
                .. ', which releasing the lock needs; nothing was written'})
        end
    end
end
