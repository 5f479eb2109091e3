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
-- ARGV[6]  request id of this release, the same for every send of it
--
-- Reply: nil when the owner holds nothing; 0 when holds remain (re-entered); 1 when the
--        lock was freed and the message published (unless ARGV[4] is empty).
-- A send of a request that already ran replays its reply from the latch instead of
-- releasing a second time. The outcome is known from the count before anything is written,
-- so it is recorded and the previous record read in one command, and a last release tells
-- the waiters before it deletes the hash (a refused publish then leaves it as it was).
local key, channel, latch = KEYS[1], KEYS[2], KEYS[3]
local message, lease, owner, publish = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local latch_ttl, request = ARGV[5], ARGV[6]
local invalid = invalid_ms(lease, latch_ttl)
if invalid then
    return invalid
end

local outcome = release_outcome(tonumber(redis.call('hget', key, owner)))
permit_release_hold(outcome, key, owner, lease)
-- A last release tells the waiters first (a send that only replays tells them again: they
-- look, and find it held).
local replayed, reply =
    tell_and_claim(outcome == 1, publish, channel, message, latch, latch_ttl, request, outcome)
if replayed then
    return reply
end
release_hold(outcome, key, owner, lease)
return outcome
