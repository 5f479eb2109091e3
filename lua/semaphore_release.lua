-- Gives permits back (Redisson's release, protocol §13.2): no owner check, a missing counter
-- starts at 0, an existing TTL stays. Tells the waiters the new count. Applied once however
-- often it is sent (see once.lua).
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_sc:{<raw>}
-- KEYS[3]  this release's record redisson_sc_attempt:{<raw>}:<client id>:<write id>
-- KEYS[4…] records of this client's writes whose replies arrived: deleted
-- ARGV[1]  permits to give back, 1 or more
-- ARGV[2]  how to tell waiters: publish, spublish or both
-- ARGV[3]  how long the record is kept, ms
-- ARGV[4]  '1' to give them back only to an existing counter (Redisson 4.0's
--          releaseIfExists), else '0'
--
-- Reply: the free permits after the release; nil when ARGV[4] is '1' and there is no
-- counter (nothing changed, no one told). A copy sent again answers as the first did.
local done = {unpack(KEYS, 4)}
local ran, reply = replayed(KEYS[3], done)
if ran then
    return reply
end
local needs = 'releasing permits'
permit_records(needs, KEYS[3], done)
if ARGV[4] == '1' and redis.call('exists', KEYS[1]) == 0 then
    forget(done)
    return remember(KEYS[3], false, ARGV[3])
end
local count = permits_of(KEYS[1]) + tonumber(ARGV[1])
within_range(KEYS[1], count)
permit(needs, 'incrby', KEYS[1], ARGV[1])
notify_before_writing(ARGV[2], KEYS[2], decimal(count), needs)
count = first_write(needs, 'incrby', KEYS[1], ARGV[1])
forget(done)
return remember(KEYS[3], count, ARGV[3])
