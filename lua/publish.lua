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
        if not redis.acl_check_cmd(command, channel, message) then
            error({err = 'NOPERM this user may not run ' .. command .. ' on ' .. channel
                .. ', which releasing the lock needs; nothing was written'})
        end
    end
end
