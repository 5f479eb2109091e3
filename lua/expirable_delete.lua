-- Deletes a permit-expirable semaphore (Redisson's delete, protocol §15.2): its counter and
-- its leases. Tells no one.
--
-- KEYS[1]  counter <raw>
-- KEYS[2]  leases {<raw>}:timeout
--
-- Reply: how many of the two keys existed.
return first_write('deleting the semaphore', 'del', KEYS[1], KEYS[2])
