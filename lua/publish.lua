-- Shared snippet: telling a lock's waiters that it may be free (protocol §9). `publish` is
-- what the client's pub/sub mode chose: 'publish', 'spublish', 'both' (to reach classic and
-- sharded listeners alike), or '' to tell no one (the spin lock).
-- A server without SPUBLISH (older than 7.0, say a node that joined a cluster after the
-- client probed it) must not fail a release: SPUBLISH is tried with redis.pcall, and
-- PUBLISH sent in its place.

-- Refuses when `reply`, what redis.pcall gave for `command` on `channel`, is an error.
local function refuse_failed(reply, command, channel, needs)
    if type(reply) == 'table' and reply.err then
        refuse(command, channel, needs, reply.err)
    end
end

-- Tells the waiters, for a script that knows before it writes that it will free the lock (a
-- release, a force release, a waiter leaving the head of a fair queue). They are told
-- first: a publish the server refuses (the user's ACL) fails the script before anything is
-- written, where a refusal after the writes would leave the hold gone and the waiters never
-- told. Nobody acts on the message before the script has ended, so the waiters find the
-- lock free. `needs`: what the script does, for the refusal (see refuse in permit.lua);
-- 'releasing the lock' when not given.
local function notify_before_writing(publish, channel, message, needs)
    needs = needs or 'releasing the lock'
    if publish == '' then
        return
    end
    if publish ~= 'spublish' then
        refuse_failed(redis.pcall('publish', channel, message), 'publish', channel, needs)
    end
    if publish ~= 'publish' then
        local reply = redis.pcall('spublish', channel, message)
        if type(reply) == 'table' and reply.err then
            -- Refused, unless the server lacks SPUBLISH: then PUBLISH reaches the waiters.
            -- (A server without SPUBLISH may lack acl_check_cmd too.)
            if redis.acl_check_cmd and pcall(redis.acl_check_cmd, 'spublish', channel, message) then
                refuse('spublish', channel, needs, reply.err)
            end
            if publish == 'spublish' then
                refuse_failed(redis.pcall('publish', channel, message), 'publish', channel, needs)
            end
        end
    end
end
