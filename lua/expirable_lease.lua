-- A permit's lease, after reaping every expired permit (Redisson's updateLeaseTime and
-- getLeaseTime, protocol §15.2): an expired permit, once reaped, is gone.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  leases {<raw>}:timeout
-- KEYS[3]  channel redisson_sc:{<raw>}
-- ARGV[1]  now, epoch ms by the caller's clock
-- ARGV[2]  how to tell waiters: publish, spublish or both
-- ARGV[3]  the id, 16 raw bytes
-- ARGV[4]  the new end of its lease, epoch ms or NEVER; '' only reads it
--
-- Reply: -2 no such permit (nothing else written); when updating, 1; when reading, -1 for a
--        lease that never ends, else the ms left.
local needs = 'changing a lease'
reap(needs, KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], nil)
local score = redis.call('zscore', KEYS[2], ARGV[3])
if not score then
    return -2
end
if ARGV[4] ~= '' then
    first_write(needs, 'zadd', KEYS[2], ARGV[4], ARGV[3])
    return 1
end
if tonumber(score) == NEVER then
    return -1
end
return math.max(tonumber(score) - tonumber(ARGV[1]), 0)
