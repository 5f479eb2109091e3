-- Takes every free permit (Redisson's drainPermits, protocol §13.2): the counter becomes 0 by
-- SET (a TTL is dropped, as Java does); a missing counter stays missing. Tells no one.
--
-- KEYS[1]  counter <raw>
--
-- Reply: the counter before (0 when it was missing).
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
local count = permits_of(KEYS[1])
first_write('draining permits', 'set', KEYS[1], '0')
return count
