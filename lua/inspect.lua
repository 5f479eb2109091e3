-- Read everything Redis holds for one lock name, in one consistent snapshot, for operators
-- (the `redisson-lock` CLI, `LockClient::inspect`). Writes nothing. Protocol §2.3 names the
-- keys; §3.1, §4.1, §5.1, §7, §13.1, §14.1 and §15.1 their layouts.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  fair queue redisson_lock_queue:{<raw>}
-- KEYS[3]  fair deadlines redisson_lock_timeout:{<raw>}
-- KEYS[4]  fencing token redisson_lock_token:{<raw>}
-- KEYS[5]  permit-expirable semaphore's leases {<raw>}:timeout
-- ARGV[1]  reader key prefix: {<raw>}, or <raw> when it has a '{'; reader <f>'s hold #i
--          has the timeout key <key prefix>:<f>:rwlock_timeout:<i>
-- ARGV[2]  the most fields, queue entries and reader timeout keys to return (each)
--
-- Reply: an array of
--   1 the lock key's type ('none', 'hash', ...)   2 its PTTL
--   3 its field count (0 unless a hash)            4 [field, value, ...], empty when the
--                                                    count is over ARGV[2]
--   5 the queue's type   6 its length   7 its first ARGV[2] owner fields
--   8 the deadlines' type   9 [owner field, deadline in epoch ms, ...], first ARGV[2]
--   10 the token key's type   11 its value, or false
--   12 [reader field, hold number, PTTL of its timeout key, ...] when the hash has a mode
--   13 the lock key's value when it is a string of at most 32 bytes (a semaphore's or a
--      latch's count), or false
--   14 the leases' type   15 their number   16 [permit id, expiry in epoch ms, ...], the
--      first ARGV[2] by expiry
-- A key of an unexpected type is reported by its type and not read.
local key, queue, deadlines, token, leases = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local key_prefix, limit = ARGV[1], tonumber(ARGV[2])

local function kind(name)
    return redis.call('type', name)['ok']
end

local reply = {}
local key_type = kind(key)
reply[1] = key_type
reply[2] = redis.call('pttl', key)
local fields, count = {}, 0
if key_type == 'hash' then
    count = redis.call('hlen', key)
    if count <= limit then
        fields = redis.call('hgetall', key)
    end
end
reply[3], reply[4] = count, fields

local queue_type = kind(queue)
reply[5] = queue_type
if queue_type == 'list' then
    reply[6], reply[7] = redis.call('llen', queue), redis.call('lrange', queue, 0, limit - 1)
else
    reply[6], reply[7] = 0, {}
end

local deadlines_type = kind(deadlines)
reply[8] = deadlines_type
if deadlines_type == 'zset' then
    reply[9] = redis.call('zrange', deadlines, 0, limit - 1, 'WITHSCORES')
else
    reply[9] = {}
end

local token_type = kind(token)
reply[10] = token_type
reply[11] = token_type == 'string' and redis.call('get', token) or false

local readers = {}
if key_type == 'hash' and #fields > 0 and redis.call('hexists', key, 'mode') == 1 then
    for i = 1, #fields, 2 do
        local field, holds = fields[i], tonumber(fields[i + 1])
        local is_writer = string.sub(field, -6) == ':write'
        if field ~= 'mode' and not is_writer and holds then
            for n = 1, holds do
                if #readers >= limit * 3 then
                    break
                end
                local timeout = timeout_prefix(key_prefix, field) .. ':' .. n
                table.insert(readers, field)
                table.insert(readers, n)
                table.insert(readers, redis.call('pttl', timeout))
            end
        end
    end
end
reply[12] = readers
-- A count has at most 20 characters: a longer string is not read.
reply[13] = key_type == 'string' and redis.call('strlen', key) <= 32 and redis.call('get', key) or false

local leases_type = kind(leases)
reply[14] = leases_type
if leases_type == 'zset' then
    reply[15] = redis.call('zcard', leases)
    reply[16] = redis.call('zrange', leases, 0, limit - 1, 'WITHSCORES')
else
    reply[15], reply[16] = 0, {}
end
return reply
