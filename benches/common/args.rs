//! The command line, as criterion reads it.

/// The command line as criterion reads it, for the measurements criterion does not run.
pub struct Args {
    /// `cargo bench` (criterion's `--bench` without `--test`): full measurements. Otherwise
    /// (`cargo test --benches`) a short smoke run.
    pub full: bool,
    /// `--list`: name the groups, measure nothing.
    pub list: bool,
    filter: Option<String>,
}

impl Args {
    pub fn parse() -> Args {
        // Criterion's options that take a value (criterion 0.5).
        const WITH_VALUE: &[&str] = &[
            "-c",
            "--color",
            "-s",
            "--save-baseline",
            "-b",
            "--baseline",
            "--baseline-lenient",
            "--format",
            "--profile-time",
            "--load-baseline",
            "--sample-size",
            "--warm-up-time",
            "--measurement-time",
            "--nresamples",
            "--noise-threshold",
            "--confidence-level",
            "--significance-level",
            "--plotting-backend",
            "--output-format",
        ];
        let args: Vec<String> = std::env::args().skip(1).collect();
        let has = |flag: &str| args.iter().any(|a| a == flag);
        let mut filter = None;
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if WITH_VALUE.contains(&arg.as_str()) {
                rest.next();
            } else if !arg.starts_with('-') && filter.is_none() {
                filter = Some(arg.clone());
            }
        }
        Args {
            full: has("--bench") && !has("--test"),
            list: has("--list"),
            filter,
        }
    }

    /// Whether the group `name` is to run: no filter, or the filter names (part of) it.
    /// A substring test, where criterion uses a regex: plain names behave the same.
    pub fn selected(&self, name: &str) -> bool {
        match &self.filter {
            None => true,
            Some(f) => name.contains(f.as_str()) || f.contains(name),
        }
    }

    /// [`selected`](Self::selected), and not in `--list` mode (where it prints the name).
    pub fn runs(&self, name: &str) -> bool {
        if self.list {
            if self.selected(name) {
                println!("{name}: bench");
            }
            return false;
        }
        self.selected(name)
    }
}
