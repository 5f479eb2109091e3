-- One attempt to take permits (Redisson's tryAcquire, protocol §13.2). What it took is recorded
-- under the attempt's own key for a while, so that an attempt whose reply was lost can be
-- undone exactly once (lua/semaphore_undo.lua); an attempt undone before it ran takes nothing.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  this attempt's record redisson_sc_attempt:{<raw>}:<client id>:<attempt id>
-- KEYS[3…] records of this client's writes whose replies arrived: deleted (see once.lua)
-- ARGV[1]  permits to take, 1 or more
-- ARGV[2]  how long the record is kept, ms
--
-- Reply: {1, left} when the permits were taken (left: the free permits after), {0, free}
--        when too few are free, {-1} when the attempt was undone before it ran; only the
--        first writes.
local done = {unpack(KEYS, 3)}
local needs = 'acquiring permits'
permit_records(needs, KEYS[2], done)
forget(done)
if redis.call('exists', KEYS[2]) == 1 then
    return {-1}
end
local free = permits_of(KEYS[1])
local wanted = tonumber(ARGV[1])
if free < wanted then
    return {0, free}
end
first_write(needs, 'decrby', KEYS[1], ARGV[1])
redis.call('set', KEYS[2], 'taken', 'px', ARGV[2])
return {1, free - wanted}
