-- Changes the free permits by a delta (Redisson's addPermits, protocol §13.2): the counter is
-- written with SET (a missing one counts as 0; a TTL is dropped, as Java does), and the
-- waiters are told the new count, even when it is 0 or negative. Applied once however often
-- it is sent (see once.lua).
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_sc:{<raw>}
-- KEYS[3]  this change's record redisson_sc_attempt:{<raw>}:<client id>:<write id>
-- KEYS[4…] records of this client's writes whose replies arrived: deleted
-- ARGV[1]  the delta, may be negative
-- ARGV[2]  how to tell waiters: publish, spublish or both
-- ARGV[3]  how long the record is kept, ms
--
-- Reply: the free permits after the change. A copy sent again answers as the first did.
local done = {unpack(KEYS, 4)}
local ran, reply = replayed(KEYS[3], done)
if ran then
    return reply
end
local needs = 'adding permits'
permit_records(needs, KEYS[3], done)
local count = permits_of(KEYS[1]) + tonumber(ARGV[1])
within_range(KEYS[1], count)
permit(needs, 'set', KEYS[1], decimal(count))
notify_before_writing(ARGV[2], KEYS[2], decimal(count), needs)
first_write(needs, 'set', KEYS[1], decimal(count))
forget(done)
return remember(KEYS[3], count, ARGV[3])
