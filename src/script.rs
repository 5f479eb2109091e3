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

/// Lists the scripts: `NAME => "file"` embeds `lua/file.lua`; `NAME => "file" with "part"`
/// puts the shared snippet `lua/part.lua` in front of it, so each rule of the protocol is
/// written once.
macro_rules! scripts {
    ($($ident:ident => $file:literal $(with $part:literal)?),* $(,)?) => {
        $(pub(crate) static $ident: Script = Script::new(
            $file,
            concat!(
                $(include_str!(concat!("../lua/", $part, ".lua")),)?
                include_str!(concat!("../lua/", $file, ".lua"))
            ),
        );)*

        #[cfg(test)]
        pub(crate) static ALL: &[&Script] = &[$(&$ident),*];
    };
}

scripts! {
    LOCK_ACQUIRE => "lock_acquire" with "common",
    LOCK_RELEASE => "lock_release" with "common",
    LOCK_FORCE_RELEASE => "lock_force_release",
    RENEW_BATCH => "renew_batch" with "common",
    FAIR_ACQUIRE => "fair_acquire" with "common",
    FAIR_ACQUIRE_FAILED => "fair_acquire_failed",
    FAIR_RELEASE => "fair_release" with "common",
    FAIR_FORCE_RELEASE => "fair_force_release",
    FENCED_ACQUIRE => "fenced_acquire" with "common",
    SPIN_RELEASE => "spin_release" with "common",
    SPIN_FORCE_RELEASE => "spin_force_release",
    READ_ACQUIRE => "read_acquire" with "common",
    READ_RELEASE => "read_release" with "common",
    READ_FORCE_RELEASE => "read_force_release",
    READ_RENEW_BATCH => "read_renew_batch" with "common",
    READ_LOCKED => "read_locked",
    WRITE_ACQUIRE => "write_acquire" with "common",
    WRITE_RELEASE => "write_release" with "common",
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
