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

-- The error reply that fails the script: the user may not run `command` on `channel` (`why`:
-- the server's own words, when it refused the command itself). The script returns it from
-- its top level (an error raised as a table reaches the client garbled on Redis 6.2).
local function refusal(command, channel, why)
    local detail = ''
    if why then
        detail = ' (' .. why .. ')'
    end
    return redis.error_reply('NOPERM this user may not run ' .. command .. ' on ' .. channel
        .. ', which releasing the lock needs; nothing was written' .. detail)
end

-- The refusal when `reply`, what redis.pcall gave for `command` on `channel`, is an error.
local function refusal_of(reply, command, channel)
    if type(reply) == 'table' and reply.err then
        return refusal(command, channel, reply.err)
    end
    return nil
end

-- notify for a release, which knows before it writes that it will free the lock: it tells
-- the waiters first, and a publish the server refuses (the user's ACL) fails the script
-- before anything is written, where a refusal after the writes would leave the hold gone
-- and the waiters never told. Nobody acts on the message before the script has ended, so
-- the waiters find the lock free. Returns the refusal, which the script returns at once,
-- or nil.
local function notify_before_writing(publish, channel, message)
    if publish == '' then
        return nil
    end
    if publish ~= 'spublish' then
        local refused = refusal_of(redis.pcall('publish', channel, message), 'publish', channel)
        if refused then
            return refused
        end
    end
    if publish ~= 'publish' then
        local reply = redis.pcall('spublish', channel, message)
        if type(reply) == 'table' and reply.err then
            -- Refused, unless the server lacks SPUBLISH: then PUBLISH reaches the waiters.
            -- (A server without SPUBLISH may lack acl_check_cmd too.)
            if redis.acl_check_cmd and pcall(redis.acl_check_cmd, 'spublish', channel, message) then
                return refusal('spublish', channel, reply.err)
            end
            if publish == 'spublish' then
                return refusal_of(redis.pcall('publish', channel, message), 'publish', channel)
            end
        end
    end
    return nil
end
