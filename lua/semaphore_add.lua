-- Changes the free permits by a delta (Redisson's addPermits, protocol §13.2): the counter is
-- written with SET (a missing one counts as 0; a TTL is dropped, as Java does), and the
-- waiters are told the new count, even when it is 0 or negative.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_sc:{<raw>}
-- ARGV[1]  the delta, may be negative
-- ARGV[2]  how to tell waiters: publish, spublish or both
--
-- Reply: the free permits after the change.
local needs = 'adding permits'
local count = permits_of(KEYS[1]) + tonumber(ARGV[1])
within_range(KEYS[1], count)
permit(needs, 'set', KEYS[1], decimal(count))
notify_before_writing(ARGV[2], KEYS[2], decimal(count), needs)
first_write(needs, 'set', KEYS[1], decimal(count))
return count
