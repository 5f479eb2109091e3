-- Undoes an acquire attempt whose reply was lost (lua/semaphore_acquire.lua): gives back
-- the permits it took, if it ran, and keeps it from taking any should it run later.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_sc:{<raw>}
-- KEYS[3]  the attempt's record redisson_sc_attempt:{<raw>}:<client id>:<attempt id>
-- ARGV[1]  permits the attempt asked for
-- ARGV[2]  how long the record is kept, ms
-- ARGV[3]  how to tell waiters: publish, spublish or both
--
-- Reply: 1 when the attempt had taken its permits and they were given back (waiters told
--        the new count), 0 when it had taken none.
local needs = 'giving back the permits of an unanswered acquire'
if redis.call('get', KEYS[3]) == 'taken' then
    local count = permits_of(KEYS[1]) + tonumber(ARGV[1])
    within_range(KEYS[1], count)
    permit(needs, 'incrby', KEYS[1], ARGV[1])
    permit(needs, 'set', KEYS[3], 'undone', 'px', ARGV[2])
    notify_before_writing(ARGV[3], KEYS[2], decimal(count), needs)
    first_write(needs, 'incrby', KEYS[1], ARGV[1])
    redis.call('set', KEYS[3], 'undone', 'px', ARGV[2])
    return 1
end
first_write(needs, 'set', KEYS[3], 'undone', 'px', ARGV[2])
return 0
