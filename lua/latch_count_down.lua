-- Counts a count-down latch down by one (Redisson's countDown, protocol §14.2). Java runs
-- DECR, deletes the key when the result is 0 or less, and publishes `0` when it is exactly 0;
-- the same effects here, decided from the count read first, so that waiters are told before
-- the write (see notify_before_writing). A missing latch stays missing, and tells no one.
-- Applied once however often it is sent (see once.lua).
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_countdownlatch__channel__{<raw>}
-- KEYS[3]  this count-down's record redisson_countdownlatch_attempt:{<raw>}:<client id>:<write id>
-- KEYS[4…] records of this client's writes whose replies arrived: deleted
-- ARGV[1]  how to tell waiters: publish, spublish or both
-- ARGV[2]  how long the record is kept, ms
--
-- Reply: the count left (0 when the latch is open, or was missing). A copy sent again
-- answers as the first did.
local done = {unpack(KEYS, 4)}
local ran, reply = replayed(KEYS[3], done)
if ran then
    return reply
end
local count = count_of(KEYS[1])
local needs = 'counting the latch down'
permit_records(needs, KEYS[3], done)
if count == nil then
    forget(done)
    return remember(KEYS[3], 0, ARGV[2])
end
if count > 1 then
    local left = first_write(needs, 'decr', KEYS[1])
    forget(done)
    return remember(KEYS[3], left, ARGV[2])
end
permit(needs, 'del', KEYS[1])
if count == 1 then
    notify_before_writing(ARGV[1], KEYS[2], '0', needs)
end
first_write(needs, 'del', KEYS[1])
forget(done)
return remember(KEYS[3], 0, ARGV[2])
