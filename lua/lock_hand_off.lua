-- Release one hold (RLock, and the kinds sharing its hash) and, when it is the owner's last,
-- give the lock to a waiter of the same client in the same step instead of freeing it: the
-- hash goes from one owner field to the next, as if the waiter had acquired it the moment
-- the holder released it. Nothing is published, since the lock never becomes free. What
-- Java reads stays what Redisson writes: one owner field with its count, the TTL its lease,
-- and for a fenced lock the token counter one higher, as after the heir's own acquisition.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  (fenced lock only) token counter redisson_lock_token:{<raw>}
-- KEYS[#]  unlock latch redisson_unlock_latch:{<raw>}:<id> (the last key)
-- ARGV[1]  lease in ms that a partial release resets the TTL to
-- ARGV[2]  owner field <client uuid>:<owner id> of the hold released
-- ARGV[3]  the heir's owner field (a waiter of the same client)
-- ARGV[4]  the heir's lease in ms
-- ARGV[5]  latch TTL in ms
-- ARGV[6]  request id of this release, the same for every send of it
--
-- Reply: nil when the owner holds nothing; 0 when holds remain (re-entered, the heir gets
--        nothing); 2 when the lock went to the heir, which now holds it once, or with a
--        token counter {2, the heir's token}.
-- A send of a request that already ran replays its reply from the latch (see release.lua).
local key, latch = KEYS[1], KEYS[#KEYS]
local counter = #KEYS == 3 and KEYS[2] or nil
local lease, owner, heir, heir_lease = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local latch_ttl, request = ARGV[5], ARGV[6]
local invalid = invalid_ms(lease, heir_lease, latch_ttl)
if invalid then
    return invalid
end

local needs = 'handing the lock over'
local outcome = release_outcome(tonumber(redis.call('hget', key, owner)))
if outcome == 1 then
    outcome = HANDED_OVER
    permit(needs, 'del', key)
    permit(needs, 'hincrby', key, heir, '1')
    permit(needs, 'pexpire', key, heir_lease)
    if counter then
        permit(needs, 'incr', counter)
        -- Read before any write, so that a counter INCR would refuse fails the release whole.
        local current = redis.call('get', counter)
        if current and not string.match(current, '^%-?%d+$') then
            return redis.error_reply('ERR fencing token counter ' .. counter .. ' holds no integer')
        end
    end
else
    permit_release_hold(outcome, key, owner, lease)
end
local replayed, reply = latch_claim(latch, latch_ttl, request, outcome)
if replayed then
    return reply
end
if outcome ~= HANDED_OVER then
    release_hold(outcome, key, owner, lease)
    return outcome
end
-- Deleted first: the heir's count starts at one whatever the hash held.
redis.call('del', key)
redis.call('hincrby', key, heir, '1')
redis.call('pexpire', key, heir_lease)
if not counter then
    return HANDED_OVER
end
local token = redis.call('incr', counter)
record_token(latch, latch_ttl, request, token)
return {HANDED_OVER, token}
