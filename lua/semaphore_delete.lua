-- Deletes a semaphore's counter (Redisson's delete of an RSemaphore, protocol §13.2). Tells
-- no one: waiters find no permits until the semaphore is set again.
--
-- KEYS[1]  counter <raw>
--
-- Reply: 1 when the counter existed, else 0.
return first_write('deleting the semaphore', 'del', KEYS[1])
