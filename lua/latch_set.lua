-- Sets a count-down latch's count unless it has one already (Redisson's trySetCount,
-- protocol §14.2), and tells its waiters `1` ("a new count"), as Java does.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_countdownlatch__channel__{<raw>}
-- ARGV[1]  the count, 0 or more, in decimal
-- ARGV[2]  how to tell waiters: publish, spublish or both
--
-- Reply: 1 when the count was set (and waiters told), 0 when the latch had a count: nothing
--        changed.
if count_of(KEYS[1]) ~= nil then
    return 0
end
local needs = 'setting the count'
permit(needs, 'set', KEYS[1], ARGV[1])
notify_before_writing(ARGV[2], KEYS[2], '1', needs)
first_write(needs, 'set', KEYS[1], ARGV[1])
return 1
