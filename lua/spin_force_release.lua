-- Free a spin lock whoever holds it (RSpinLock forceUnlock). Redisson protocol §8.1.
-- Spin waiters poll, so nothing is published.
--
-- KEYS[1]  lock hash <raw>
--
-- Reply: 1 when a hold was deleted, 0 when the lock was free.
return redis.call('del', KEYS[1])
