-- Release one fair hold, with Redisson's unlock latch. Redisson protocol §4.6, with the
-- stale-head purge of §4.2. Only the head waiter is told, on its own channel. This client
-- may name a waiter of its own as heir: when the release frees the lock and that waiter is
-- first in line, it gets the lock in the same step instead, as if its own acquire had run
-- the moment the lock was freed (lua/fair_acquire.lua), and nobody is told.
--
-- KEYS[1]  lock hash <raw>
-- KEYS[2]  waiting list redisson_lock_queue:{<raw>} (owner fields, head = next in line)
-- KEYS[3]  waiter deadlines redisson_lock_timeout:{<raw>} (zset, score = epoch ms)
-- KEYS[4]  channel base redisson_lock__channel:{<raw>}; the head <h> is told on <base>:<h>
-- KEYS[5]  the owner's trace redisson_lock_took:{<raw>}:<owner field> (this client's own,
--          see lua/fair_acquire.lua), deleted with the owner's last hold; Java sends none
-- KEYS[6]  optional, with the heir: the heir's trace, set to the heir's wait id
-- KEYS[#]  unlock latch redisson_unlock_latch:{<raw>}:<id> (KEYS[5] without the trace)
-- ARGV[1]  unlock message, always "0"
-- ARGV[2]  lease in ms that a partial release resets the TTL to
-- ARGV[3]  owner field <client uuid>:<owner id>
-- ARGV[4]  now: the caller's wall clock in epoch ms
-- ARGV[5]  how to tell waiters: publish, spublish or both (see publish.lua)
-- ARGV[6]  optional, with KEYS[6] and ARGV[7] to ARGV[9]: the heir's owner field
-- ARGV[7]  the heir's lease in ms
-- ARGV[8]  the heir's wait in ms, as it joined the line with
-- ARGV[9]  the heir's wait id
-- ARGV[#-1] latch TTL in ms
-- ARGV[#]  request id of this release, the same for every send of it
--
-- Reply: nil when the owner holds nothing; 0 when holds remain (re-entered; the TTL is
--        reset to the lease); 1 when the lock was freed and the head waiter was told; 2 when
--        it went to the heir, which now holds it once with its lease.
-- A retry with the same request id replays the first reply from the latch.
--
-- Deliberate difference from Java: when the lock hash does not exist at all (the hold
-- expired or was force-unlocked), Java tells the head waiter, writes the latch and replies
-- 1 (success). This script also tells the head waiter and writes the latch, but replies nil,
-- because this crate's unlock reports a lost hold. The latch then holds "none", which
-- replays as nil. Other clients only see the data and the message, which are as Java's.
local key, queue, deadlines, channel_base = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local trace, heir_trace, latch = #KEYS >= 6 and KEYS[5], #KEYS == 7 and KEYS[6], KEYS[#KEYS]
local message, lease, owner = ARGV[1], ARGV[2], ARGV[3]
local now, publish = tonumber(ARGV[4]), ARGV[5]
local latch_ttl, request = ARGV[#ARGV - 1], ARGV[#ARGV]
local heir, heir_lease, heir_wait, heir_wait_id
if heir_trace then
    heir, heir_lease, heir_wait, heir_wait_id = ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9]
end
local invalid = invalid_ms(lease, latch_ttl) or (heir and invalid_ms(heir_lease))
if invalid then
    return invalid
end

-- The outcome is known from the count before anything is written: it is recorded and the
-- previous record read in one command, and a release that frees the lock (or finds no lock)
-- tells the live head first, so that a publish the server refuses leaves everything as it
-- was. (A send that only replays tells it again: it looks, and finds the lock as it is.)
local exists = redis.call('exists', key) == 1
local outcome = release_outcome(exists and tonumber(redis.call('hget', key, owner)))
-- The head the stale-head purge leaves, found before anything is written.
local head, stale = live_head(queue, deadlines, now)
if stale > 0 then
    permit('releasing the lock', 'lpop', queue)
    permit('releasing the lock', 'zrem', deadlines, '')
end
permit_release_hold(outcome, key, owner, lease, trace)
if outcome == 1 and heir and head == heir then
    outcome = HANDED_OVER
    local needs = 'handing the lock over'
    permit(needs, 'lpop', queue)
    permit(needs, 'zrem', deadlines, heir)
    permit(needs, 'zincrby', deadlines, '0', heir)
    permit(needs, 'hset', key, heir, '1')
    permit(needs, 'pexpire', key, heir_lease)
    permit(needs, 'set', heir_trace, heir_wait_id, 'px', heir_lease)
end
local tell = head and (not exists or outcome == 1)
local channel = head and channel_base .. ':' .. head
local replayed, reply =
    tell_and_claim(tell, publish, channel, message, latch, latch_ttl, request, outcome)
if replayed then
    return reply
end
drop_heads(queue, deadlines, stale)
if outcome ~= HANDED_OVER then
    release_hold(outcome, key, owner, lease, trace)
    return outcome
end
-- The heir's acquire, as lua/fair_acquire.lua takes a free lock for the head of the line.
release_hold(1, key, owner, lease, trace)
local ahead = redis.call('zscore', deadlines, heir)
redis.call('lpop', queue)
close_gap(deadlines, heir, ahead, heir_wait)
redis.call('hset', key, heir, 1)
redis.call('pexpire', key, heir_lease)
redis.call('set', heir_trace, heir_wait_id, 'px', heir_lease)
return HANDED_OVER
