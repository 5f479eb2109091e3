//! What every layer uses: the crate's error, boxed futures, the names of keys and channels, owners, the
//! pauses between tries, whole milliseconds, background work and observability.

pub(crate) mod background;
pub(crate) mod backoff;
pub(crate) mod boxed;
pub(crate) mod error;
pub(crate) mod keys;
pub(crate) mod observe;
pub(crate) mod owner;
pub(crate) mod time;
