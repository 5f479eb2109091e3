-- Shared snippet: writes the server would refuse (this user's ACL: a command, a key or a
-- channel it may not use), found before a script's first write. Redis rolls nothing back:
-- the writes made before a refused command stay, and a hold written before its refused
-- PEXPIRE would never expire. So a script asks, before its first write, for every write
-- that comes after it; the first one, if refused, has written nothing (first_write says so).

-- Fails the script: the user may not run `command` on `target` (a key or a channel), which
-- `needs` (what the script does: 'acquiring the lock', ...) calls for. `why`: the server's
-- own words, when it refused the command itself.
local function refuse(command, target, needs, why)
    local detail = ''
    if why then
        detail = ' (' .. why .. ')'
    end
    error({err = 'NOPERM this user may not run ' .. command .. ' on ' .. target .. ', which '
        .. needs .. ' needs; nothing was written' .. detail})
end

-- Refuses `command` with these arguments (the first names the key or channel) if the server
-- would refuse it to this user. redis.acl_check_cmd (Redis 7.0+) answers for the command, its
-- keys and its channels. An older server is not asked: there a refusal after the first write
-- leaves that write, and the scripts make sure no key it makes is left without a TTL (see
-- ttl_permitted).
local function permit(needs, command, ...)
    local check = redis.acl_check_cmd
    if check and not check(command, ...) then
        refuse(command, (...), needs)
    end
end

-- An error redis.pcall gave, in the server's own words: Redis 6.2 puts where the script made
-- the call (`@user_script: 12: -`) in front of them.
local function server_words(err)
    local words = err
    repeat
        local before = words
        words = words:gsub('^@user_script:%s?%d+:%s', '')
    until words == before
    return (words:gsub('^%-', ''))
end

-- The script's first write, made by redis.pcall: refused (or failed), it wrote nothing, and
-- the error says so after the server's own words. Returns its reply.
local function first_write(needs, command, ...)
    local reply = redis.pcall(command, ...)
    if type(reply) == 'table' and reply.err then
        error({err = server_words(reply.err) .. ' (' .. command .. ' on ' .. (...) .. ', which '
            .. needs .. ' needs; nothing was written)'})
    end
    return reply
end

-- Before a key that does not exist yet is written, on a server that permit cannot ask:
-- PEXPIRE changes nothing on a missing key, so a refused TTL is found before the key exists.
local function ttl_permitted(key, ms, needs)
    if redis.acl_check_cmd then
        return
    end
    local reply = redis.pcall('pexpire', key, ms)
    if type(reply) == 'table' and reply.err then
        local words = server_words(reply.err)
        -- Only the ACL's refusal is one: a demoted master's READONLY, say, is what it is.
        if words:find('^NOPERM') or words:find("can't run") or words:find('no permissions') then
            refuse('pexpire', key, needs, words)
        end
        error({err = words .. ' (nothing was written)'})
    end
end
