-- Undoes an acquire attempt whose reply was lost (lua/expirable_acquire.lua): gives back
-- exactly those of its ids that are still held (none when it never ran, or its permits
-- expired and were reaped), and keeps it from taking any should it run later.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  leases {<raw>}:timeout
-- KEYS[3]  channel redisson_sc:{<raw>}
-- KEYS[4]  the attempt's record redisson_sc_attempt:{<raw>}:<client id>:<attempt id>
-- ARGV[1]  how long the record is kept, ms
-- ARGV[2]  how to tell waiters: publish, spublish or both
-- ARGV[3]  and after it: the attempt's ids
--
-- Reply: how many permits were given back (waiters told the new count when some were).
local needs = 'giving back the permits of an unanswered acquire'
local held = {}
for i = 3, #ARGV do
    if redis.call('zscore', KEYS[2], ARGV[i]) then
        held[#held + 1] = ARGV[i]
    end
end
if #held == 0 then
    first_write(needs, 'set', KEYS[4], 'undone', 'px', ARGV[1])
    return 0
end
local count = permits_of(KEYS[1]) + #held
within_range(KEYS[1], count)
permit(needs, 'set', KEYS[4], 'undone', 'px', ARGV[1])
permit(needs, 'incrby', KEYS[1], '1')
permit(needs, 'zrem', KEYS[2], held[1])
notify_before_writing(ARGV[2], KEYS[3], decimal(count), needs)
first_write(needs, 'set', KEYS[4], 'undone', 'px', ARGV[1])
zrem_all(KEYS[2], held)
redis.call('incrby', KEYS[1], #held)
return #held
