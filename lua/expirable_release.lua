-- Gives one permit back by its id (Redisson's permit-expirable release / tryRelease,
-- protocol §15.2), and tells the waiters the new count. As in Java, a permit whose lease
-- had run out but that no one reaped yet goes back to the pool too, and the caller is told
-- it failed.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  leases {<raw>}:timeout
-- KEYS[3]  channel redisson_sc:{<raw>}
-- ARGV[1]  the id, 16 raw bytes
-- ARGV[2]  now, epoch ms by the caller's clock
-- ARGV[3]  how to tell waiters: publish, spublish or both
--
-- Reply: 1 released; 0 given back, but its lease had run out; -1 no such permit (never
--        taken, released already, or expired and reaped): nothing written.
local score = redis.call('zscore', KEYS[2], ARGV[1])
if not score then
    return -1
end
local needs = 'releasing a permit'
local count = permits_of(KEYS[1]) + 1
within_range(KEYS[1], count)
permit(needs, 'incrby', KEYS[1], '1')
notify_before_writing(ARGV[3], KEYS[3], decimal(count), needs)
first_write(needs, 'zrem', KEYS[2], ARGV[1])
redis.call('incrby', KEYS[1], 1)
if tonumber(score) <= tonumber(ARGV[2]) then
    return 0
end
return 1
