-- Release one hold (RLock, fenced lock, spin lock), with Redisson's unlock latch. Redisson
-- protocol §3.4; for the spin lock (§8.1) with an empty publish command, since its waiters
-- poll.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  unlock channel redisson_lock__channel:{<raw>}
-- KEYS[3]  unlock latch redisson_unlock_latch:{<raw>}:<id>
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  lease in ms that a partial release resets the TTL to
-- ARGV[3]  owner field <client uuid>:<owner id>
-- ARGV[4]  how to tell waiters: publish, spublish or both; empty to tell no one (spin lock)
-- ARGV[5]  latch TTL in ms
-- ARGV[6]  request id of this release, the same for its resends
-- ARGV[7]  "1" when this is a resend (only a resend can find its request in the latch)
--
-- Reply: nil when the owner holds nothing (no latch is written);
--        0 when holds remain (re-entered); 1 when the lock was freed and the message
--        published (unless ARGV[4] is empty).
-- A retry with the same request id replays the first reply from the latch instead of
-- releasing a second time.
local key, channel, latch = KEYS[1], KEYS[2], KEYS[3]
local message, lease, owner, publish = ARGV[1], valid_ms(ARGV[2]), ARGV[3], ARGV[4]
local latch_ttl = valid_ms(ARGV[5])
local request, resent = ARGV[6], ARGV[7] == '1'

check_may_publish(publish, channel, message)
local replayed, reply = latch_replay(latch, request, resent)
if replayed then
    return reply
end
local released = release_hold(key, owner, lease)
if released == nil then
    return nil
end
if released == 1 then
    notify(publish, channel, message)
end
return latch_record(latch, latch_ttl, request, released)
