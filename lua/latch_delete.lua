-- Deletes a count-down latch (Redisson's delete, protocol §14.2) and, when there was one,
-- tells its waiters `1` ("a new count"), as Java does. A key of another type, or a string
-- that holds no count, is refused and left alone, as every other latch call refuses it.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  channel redisson_countdownlatch__channel__{<raw>}
-- ARGV[1]  how to tell waiters: publish, spublish or both
--
-- Reply: 1 when a latch was deleted, 0 when there was none.
if count_of(KEYS[1]) == nil then
    return 0
end
local needs = 'deleting the latch'
permit(needs, 'del', KEYS[1])
notify_before_writing(ARGV[1], KEYS[2], '1', needs)
first_write(needs, 'del', KEYS[1])
return 1
