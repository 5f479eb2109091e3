-- Gives several permits back by their ids, all or none (Redisson's tryRelease(ids), 3.23.4+,
-- protocol §15.2): nothing changes unless every id is held with a lease still running. Then
-- reaps every expired permit, gives the ids back and, as Java, publishes how many it gave
-- back (not the counter). Answers the same however often it is sent (see once.lua): a copy
-- sent again after the first gave the ids back says so, where the ids alone would say they
-- are not held.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  leases {<raw>}:timeout
-- KEYS[3]  channel redisson_sc:{<raw>}
-- KEYS[4]  this release's record redisson_sc_attempt:{<raw>}:<client id>:<write id>
-- KEYS[5…] records of this client's writes whose replies arrived: deleted
-- ARGV[1]  now, epoch ms by the caller's clock
-- ARGV[2]  how to tell waiters: publish, spublish or both
-- ARGV[3]  how long the record is kept, ms
-- ARGV[4]  and after it: the ids, 16 raw bytes each
--
-- Reply: 1 when they were given back, 0 when one was missing or expired: nothing written.
local done = {unpack(KEYS, 5)}
local ran, reply = replayed(KEYS[4], done)
if ran then
    return reply
end
local needs = 'releasing permits'
permit_records(needs, KEYS[4], done)
local now = tonumber(ARGV[1])
local ids, seen = {}, {}
for i = 4, #ARGV do
    local score = redis.call('zscore', KEYS[2], ARGV[i])
    if not score or tonumber(score) <= now then
        forget(done)
        return remember(KEYS[4], 0, ARGV[3])
    end
    if not seen[ARGV[i]] then
        seen[ARGV[i]] = true
        ids[#ids + 1] = ARGV[i]
    end
end
reap(needs, KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[1], nil)
within_range(KEYS[1], permits_of(KEYS[1]) + #ids)
permit(needs, 'incrby', KEYS[1], '1')
notify_before_writing(ARGV[2], KEYS[3], decimal(#ids), needs)
permit(needs, 'zrem', KEYS[2], ids[1])
zrem_all(KEYS[2], ids)
redis.call('incrby', KEYS[1], #ids)
forget(done)
return remember(KEYS[4], 1, ARGV[3])
