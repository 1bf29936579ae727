//! Build script: the git commit this crate is built from, for `registrar --version`, the start-up
//! log line, `--check`'s first line and the `thadam_iceberg_build_info` gauge
//! (`thadam_iceberg::runtime::build_info`).
//!
//! The commit is, in this order: `THADAM_ICEBERG_BUILD_COMMIT` when set (a packager building from
//! a tarball that knows its commit); `git rev-parse HEAD` when the crate is the top of a git work
//! tree (its own checkout or clone, a CI clone included); otherwise `unknown` (a crates tarball,
//! a vendored copy inside another project's repository, no git installed). The full 40-digit sha
//! is used: it names one commit across every clone and fork.
//!
//! Cargo reruns this script only when HEAD moves: it watches the work tree's `HEAD` (a checkout of
//! another branch), the ref HEAD points to (a commit), the work tree's reflog `logs/HEAD` (every
//! move of HEAD, also when the ref was packed and a commit writes it anew) and, while the ref is
//! packed, `packed-refs`. Nothing else in `.git` is watched, so `git fetch`, `git status` or a
//! commit in another worktree of the same repository does not rebuild the crate.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable the crate reads with `env!`.
const OUT_VAR: &str = "THADAM_ICEBERG_GIT_COMMIT";
/// The packager's override.
const OVERRIDE_VAR: &str = "THADAM_ICEBERG_BUILD_COMMIT";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={OVERRIDE_VAR}");
    let commit = match std::env::var(OVERRIDE_VAR) {
        Ok(value) if !value.trim().is_empty() => {
            let value = value.trim().to_string();
            // It becomes a Prometheus label value and a log field: keep it to what a commit id
            // or a release tag can be.
            let valid = value.len() <= 64
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'));
            if !valid {
                panic!(
                    "{OVERRIDE_VAR}={value:?}: expected a commit id (letters, digits, . - _ +, at \
                     most 64 characters); unset it to take the commit from git"
                );
            }
            value
        }
        _ => git_commit().unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env={OUT_VAR}={commit}");
}

/// HEAD's sha when the crate's directory is the top of a git work tree; registers the files that
/// change when HEAD moves.
fn git_commit() -> Option<String> {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let top = git(&dir, &["rev-parse", "--show-toplevel"])?;
    // Inside someone else's repository (a vendored copy, a tarball unpacked in a checkout), HEAD
    // is that repository's commit, not this crate's.
    if !same_dir(Path::new(&top), &dir) {
        return None;
    }
    let sha = git(&dir, &["rev-parse", "--verify", "HEAD"])?;
    if sha.len() != 40 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    watch(&dir, "HEAD");
    watch(&dir, "logs/HEAD");
    // On a branch: the ref's file, or packed-refs while the ref lives only there. A detached HEAD
    // holds the sha itself (HEAD is watched).
    if let Some(reference) = git(&dir, &["symbolic-ref", "-q", "HEAD"])
        && !watch(&dir, &reference)
    {
        watch(&dir, "packed-refs");
    }
    Some(sha)
}

/// Registers `.git/NAME` (wherever git keeps it for this work tree: worktrees keep HEAD apart
/// from the shared refs) with cargo; false when it does not exist (cargo would then rerun the
/// script on every build).
fn watch(dir: &Path, name: &str) -> bool {
    let Some(path) = git(dir, &["rev-parse", "--git-path", name]) else {
        return false;
    };
    let path = dir.join(path);
    if !path.is_file() {
        return false;
    }
    println!("cargo:rerun-if-changed={}", path.display());
    true
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// One git command's trimmed stdout, `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}
