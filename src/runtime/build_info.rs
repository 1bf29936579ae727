//! Which build is running: the crate's version and the git commit it was built from.
//!
//! The commit comes from `build.rs`: `git rev-parse HEAD` of the crate's own checkout,
//! `THADAM_ICEBERG_BUILD_COMMIT` when a packager sets it, and `unknown` otherwise (a crates
//! tarball, a vendored copy). Each registrar publishes them when it starts, as the Prometheus
//! info gauge `thadam_iceberg_build_info{version, commit}` (value 1) and in its start-up log line,
//! so a dashboard can show which node of a fleet runs which build; the runner prints them for
//! `--version` and on `--check`'s first line.

/// The crate's version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The full git sha this build was made from, or `unknown`.
pub const COMMIT: &str = env!("THADAM_ICEBERG_GIT_COMMIT");

/// `VERSION (commit COMMIT)`, e.g. `0.1.0 (commit 7a35d56…)`: what `registrar --version` prints
/// after the program's name.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("THADAM_ICEBERG_GIT_COMMIT"),
    ")"
);

/// Sets `thadam_iceberg_build_info{version, commit}` to 1 in the installed `metrics` recorder (a
/// no-op without one). Called by every registrar start; calling it again changes nothing.
pub fn publish() {
    metrics::gauge!(
        "thadam_iceberg_build_info",
        "version" => VERSION,
        "commit" => COMMIT
    )
    .set(1.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_is_a_sha_or_unknown() {
        // This crate is tested from its checkout, so build.rs found the commit; `unknown` is for
        // builds outside git, and a packager's override is checked by build.rs itself.
        assert!(
            COMMIT == "unknown"
                || (COMMIT.len() == 40 && COMMIT.chars().all(|c| c.is_ascii_hexdigit())),
            "{COMMIT}"
        );
        assert_eq!(VERSION_LINE, format!("{VERSION} (commit {COMMIT})"));
    }
}
