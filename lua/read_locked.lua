-- Whether the read side is locked (RReadWriteLock's read isLocked, sync form). Redisson
-- protocol §5.7.
--
-- KEYS[1]  lock hash <raw>
--
-- Reply: 1 when the lock is in read mode, or in write mode and the writer also holds read
-- holds (more fields than mode and the write field); otherwise 0.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then
    return 1
end
return 0
