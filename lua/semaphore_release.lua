-- Gives permits back (Redisson's release, protocol §13.2): no owner check, a missing counter
-- starts at 0, an existing TTL stays. Tells the waiters the new count.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_sc:{<raw>}
-- ARGV[1]  permits to give back, 1 or more
-- ARGV[2]  how to tell waiters: publish, spublish or both
-- ARGV[3]  optional: '1' to give them back only to an existing counter (Redisson 4.0's
--          releaseIfExists)
--
-- Reply: the free permits after the release; nil when ARGV[3] is '1' and there is no
-- counter (nothing changed, no one told).
if ARGV[3] == '1' and redis.call('exists', KEYS[1]) == 0 then
    return false
end
local needs = 'releasing permits'
local count = permits_of(KEYS[1]) + tonumber(ARGV[1])
within_range(KEYS[1], count)
permit(needs, 'incrby', KEYS[1], ARGV[1])
notify_before_writing(ARGV[2], KEYS[2], decimal(count), needs)
return first_write(needs, 'incrby', KEYS[1], ARGV[1])
