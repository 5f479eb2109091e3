//! What the thin public handles over a [`Lock`](crate::Lock) of one kind share: the methods
//! they pass through unchanged. Each handle writes its own acquire and release methods,
//! whose documentation differs by kind.

/// Implements, for a handle `struct $handle { inner: Lock }`: `with_lease`, `name`,
/// `lease`, the four queries and `Debug`.
macro_rules! delegate_to_lock {
    ($handle:ident) => {
        impl $handle {
            /// The same lock with another lease policy for the holds it takes from now on.
            /// [`Lease::Fixed`](crate::Lease::Fixed) disables the watchdog for those holds.
            pub fn with_lease(self, lease: $crate::Lease) -> $handle {
                $handle {
                    inner: self.inner.with_lease(lease),
                }
            }

            /// The lock's name, as given to the `LockClient` method that made the handle.
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            /// The lease policy of this handle.
            pub fn lease(&self) -> $crate::Lease {
                self.inner.lease()
            }

            /// Whether anyone (in any process, with a lock of any kind sharing the name)
            /// holds the lock.
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached,
            /// [`Error::WrongType`](crate::Error::WrongType) when the key is not a lock hash.
            pub async fn is_locked(&self) -> $crate::Result<bool> {
                self.inner.is_locked().await
            }

            /// Whether `owner` holds the lock.
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached,
            /// [`Error::WrongType`](crate::Error::WrongType) when the key is not a lock hash.
            pub async fn is_held_by(&self, owner: &$crate::LockOwner) -> $crate::Result<bool> {
                self.inner.is_held_by(owner).await
            }

            /// How many times `owner` holds the lock (0 when it does not).
            ///
            /// # Errors
            #[doc = concat!("As [`is_held_by`](", stringify!($handle), "::is_held_by).")]
            pub async fn hold_count(&self, owner: &$crate::LockOwner) -> $crate::Result<u64> {
                self.inner.hold_count(owner).await
            }

            /// How long the current hold lasts unless renewed or released; `None` when the
            /// lock is free. A hold without expiry reports `Duration::MAX`.
            ///
            /// # Errors
            /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be reached.
            pub async fn remaining_lease(&self) -> $crate::Result<Option<std::time::Duration>> {
                self.inner.remaining_lease().await
            }
        }

        impl std::fmt::Debug for $handle {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($handle))
                    .field("name", &self.inner.name())
                    .field("lease", &self.inner.lease())
                    .field("wait_strategy", &self.inner.wait_strategy())
                    .finish()
            }
        }
    };
}

pub(crate) use delegate_to_lock;
