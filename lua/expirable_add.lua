-- Changes the free permits by a delta (Redisson's permit-expirable addPermits, protocol
-- §15.2): written with SET (a missing counter counts as 0; a TTL is dropped, as Java does);
-- the waiters are told the delta, as Java, only when it is above 0.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_sc:{<raw>}
-- ARGV[1]  the delta, may be negative
-- ARGV[2]  how to tell waiters: publish, spublish or both
--
-- Reply: the free permits after.
local needs = 'adding permits'
local delta = tonumber(ARGV[1])
local count = permits_of(KEYS[1]) + delta
within_range(KEYS[1], count)
permit(needs, 'set', KEYS[1], decimal(count))
if delta > 0 then
    notify_before_writing(ARGV[2], KEYS[2], ARGV[1], needs)
end
first_write(needs, 'set', KEYS[1], decimal(count))
return count
