-- Shared epilogue, put after every script (see src/script.rs), whose own text is wrapped as
-- the function `script`. It runs the script and returns an error the script raised (a
-- refusal of permit.lua, or one of redis.call's) as the error reply it stands for, from the
-- top level: Redis 6.2 cannot print an error raised as a table and puts where it was raised
-- in front of one raised as text, while a reply returned from the top level reaches every
-- version in the script's own words. Caught, such an error is a table on 6.2 and its text on
-- 7.0 and later. A fault of the script itself (Lua's own message, which names the place) is
-- raised again, as Redis would report it.
local ran, reply = pcall(script)
if ran then
    return reply
end
if type(reply) == 'table' and reply.err then
    return redis.error_reply(reply.err)
end
if type(reply) == 'string' and not reply:find('^@?user_script:') then
    return redis.error_reply((reply:gsub('^%-', '')))
end
error(reply, 0)
