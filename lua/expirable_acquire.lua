-- One attempt to take permits under ids the caller made (Redisson's permit-expirable
-- tryAcquire, 3.23.4+, protocol §15.2): reaps at most as many expired permits as it asks
-- for, then takes them if enough are free, each id a member of the leases scored by its end.
-- An attempt undone before it ran (lua/expirable_undo.lua left its record) takes nothing.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  leases {<raw>}:timeout
-- KEYS[3]  channel redisson_sc:{<raw>}
-- KEYS[4]  this attempt's record redisson_sc_attempt:{<raw>}:<client id>:<attempt id>
-- ARGV[1]  permits to take, 1 or more
-- ARGV[2]  when their leases end, epoch ms, or NEVER
-- ARGV[3]  now, epoch ms by the caller's clock
-- ARGV[4]  how to tell waiters: publish, spublish or both
-- ARGV[5]  and after it: the ids, 16 raw bytes each, one per permit
--
-- Reply, as Java's: 'OK' when taken; ':<score>' when not, and the earliest lease ends at
--        <score>; nil when not, and no lease will end by itself.
if redis.call('exists', KEYS[4]) == 1 then
    return nil
end
local needs = 'acquiring permits'
local wanted = tonumber(ARGV[1])
reap(needs, KEYS[1], KEYS[2], KEYS[3], ARGV[4], ARGV[3], wanted)
if permits_of(KEYS[1]) >= wanted then
    permit(needs, 'zadd', KEYS[2], ARGV[2], ARGV[5])
    permit(needs, 'pexpire', KEYS[2], '1')
    first_write(needs, 'decrby', KEYS[1], ARGV[1])
    for i = 5, #ARGV do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] and tonumber(first[2]) ~= NEVER then
    return ':' .. first[2]
end
return nil
