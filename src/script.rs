//! The Lua scripts of `lua/`, embedded at build time and sent by EVALSHA.

use std::sync::OnceLock;

/// One script of `lua/`: its source, and its SHA-1 computed once on first use.
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) lua: &'static str,
    sha: OnceLock<String>,
}

impl Script {
    const fn new(name: &'static str, lua: &'static str) -> Self {
        Script {
            name,
            lua,
            sha: OnceLock::new(),
        }
    }

    /// The SHA-1 Redis files the script under (what EVALSHA names).
    pub(crate) fn sha(&self) -> &str {
        self.sha.get_or_init(|| fred::util::sha1_hash(self.lua))
    }
}

macro_rules! scripts {
    ($($ident:ident => $file:literal),* $(,)?) => {
        $(pub(crate) static $ident: Script =
            Script::new($file, include_str!(concat!("../lua/", $file, ".lua")));)*

        #[cfg(test)]
        pub(crate) static ALL: &[&Script] = &[$(&$ident),*];
    };
}

scripts! {
    LOCK_ACQUIRE => "lock_acquire",
    LOCK_RELEASE => "lock_release",
    LOCK_FORCE_RELEASE => "lock_force_release",
    RENEW_BATCH => "renew_batch",
    FAIR_ACQUIRE => "fair_acquire",
    FAIR_ACQUIRE_FAILED => "fair_acquire_failed",
    FAIR_RELEASE => "fair_release",
    FAIR_FORCE_RELEASE => "fair_force_release",
    FENCED_ACQUIRE => "fenced_acquire",
    SPIN_RELEASE => "spin_release",
    SPIN_FORCE_RELEASE => "spin_force_release",
    READ_ACQUIRE => "read_acquire",
    READ_RELEASE => "read_release",
    READ_FORCE_RELEASE => "read_force_release",
    READ_RENEW_BATCH => "read_renew_batch",
    READ_LOCKED => "read_locked",
    WRITE_ACQUIRE => "write_acquire",
    WRITE_RELEASE => "write_release",
    WRITE_FORCE_RELEASE => "write_force_release",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_has_a_header_and_a_distinct_sha() {
        let mut shas = std::collections::HashSet::new();
        for script in ALL {
            assert!(script.lua.contains("-- KEYS"), "{} lacks KEYS", script.name);
            assert!(
                script.lua.contains("-- Reply"),
                "{} lacks a reply contract",
                script.name
            );
            assert_eq!(script.sha().len(), 40);
            assert!(shas.insert(script.sha().to_owned()));
        }
    }
}
