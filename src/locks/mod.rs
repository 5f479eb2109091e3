//! The lock kinds: one file (or folder) per kind, each its marker, its protocol, its alias
//! and docs; the one generic handle of the exclusive kinds; the multi-lock over any of them.

pub(crate) mod exclusive;
pub(crate) mod fair_lock;
pub(crate) mod fenced_lock;
pub(crate) mod lock;
pub(crate) mod multi_lock;
pub(crate) mod non_reentrant;
pub(crate) mod rw_lock;
pub(crate) mod spin_lock;
