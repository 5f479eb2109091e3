-- Counts a count-down latch down by one (Redisson's countDown, protocol §14.2). Java runs
-- DECR, deletes the key when the result is 0 or less, and publishes `0` when it is exactly 0;
-- the same effects here, decided from the count read first, so that waiters are told before
-- the write (see notify_before_writing). A missing latch stays missing, and tells no one.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_countdownlatch__channel__{<raw>}
-- ARGV[1]  how to tell waiters: publish, spublish or both
--
-- Reply: the count left (0 when the latch is open, or was missing).
local count = count_of(KEYS[1])
if count == nil then
    return 0
end
local needs = 'counting the latch down'
if count > 1 then
    return first_write(needs, 'decr', KEYS[1])
end
permit(needs, 'del', KEYS[1])
if count == 1 then
    notify_before_writing(ARGV[1], KEYS[2], '0', needs)
end
first_write(needs, 'del', KEYS[1])
return 0
