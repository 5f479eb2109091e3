//! The records of this client's writes whose replies arrived, waiting to be deleted.
//!
//! A write that must run exactly once (a release, a count-down) or be undone exactly
//! (an acquisition) leaves a record under a key of its own, with a TTL long enough for any
//! resend or undo. Once its reply has arrived the record has served its purpose: rather
//! than a command of its own, the next script this client sends on the same object deletes
//! it. So the records left on the server are those of writes in flight, plus at most
//! [`KEPT_PER_KEY`] per object waiting for its next script; the others expire with their
//! TTL.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::base::keys::Str;

/// The most answered records kept per object for its next script; more expire on their own.
pub(crate) const KEPT_PER_KEY: usize = 32;

/// Answered records, by the key of the object they belong to.
#[derive(Default)]
pub(crate) struct DoneRecords {
    by_key: Mutex<HashMap<Str, Vec<Str>>>,
}

impl DoneRecords {
    /// Files the record `record` of a write on `key` whose reply arrived.
    pub(crate) fn done(&self, key: &Str, record: Str) {
        let mut by_key = self.by_key.lock();
        let records = by_key.entry(key.clone()).or_default();
        if records.len() < KEPT_PER_KEY {
            records.push(record);
        }
    }

    /// Takes the records filed for `key`, for the script about to be sent on it to delete.
    /// A script that fails may not have deleted them: they expire with their TTL.
    pub(crate) fn take(&self, key: &Str) -> Vec<Str> {
        self.by_key.lock().remove(key).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_bounded_list_per_key_until_taken() {
        let records = DoneRecords::default();
        let key: Str = "sem".into();
        for n in 0..KEPT_PER_KEY + 5 {
            records.done(&key, format!("r{n}").into());
        }
        assert_eq!(records.take(&key).len(), KEPT_PER_KEY);
        assert!(records.take(&key).is_empty());
        assert!(records.take(&"other".into()).is_empty());
    }
}
