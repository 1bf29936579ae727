//! `${file:PATH}` and `${env:NAME}` references inside string values, resolved once at load.
//!
//! A reference may be the whole value or part of a longer string (`Bearer ${env:TOKEN}`).
//! `$${` is a literal `${`. Resolved text is not scanned again, so a secret that happens to
//! contain `${` is taken as it is.
//!
//! Errors show the reference (a path or a variable name) but never what it resolved to, and
//! never the text around a malformed reference: the value may be a literal secret.

use std::path::Path;

/// Why a value could not be resolved. The message is safe to show: it holds no resolved text.
#[derive(Debug)]
pub(crate) struct RefError(pub(crate) String);

/// Resolves every reference in `raw`. Relative `${file:}` paths are relative to `base_dir` (the
/// config file's directory).
pub(crate) fn resolve(raw: &str, base_dir: &Path) -> Result<String, RefError> {
    // Fast path: most values have no reference at all.
    if !raw.contains("${") {
        return Ok(raw.to_owned());
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find("${") {
        // `$${` escapes: keep one `${` and go on after it.
        if at > 0 && rest.as_bytes()[at - 1] == b'$' {
            out.push_str(&rest[..at - 1]);
            out.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err(RefError(
                "has a `${` without a closing `}`; write `${file:PATH}` or `${env:NAME}`, or `$${` \
                 for a literal `${`"
                    .into(),
            ));
        };
        out.push_str(&lookup(&after[..end], base_dir)?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Resolves the inside of one `${...}`.
fn lookup(reference: &str, base_dir: &Path) -> Result<String, RefError> {
    if let Some(path) = reference.strip_prefix("file:") {
        if path.is_empty() {
            return Err(RefError(
                "has an empty `${file:}`; name the file to read".into(),
            ));
        }
        read_file(path, base_dir)
    } else if let Some(name) = reference.strip_prefix("env:") {
        if name.is_empty() {
            return Err(RefError(
                "has an empty `${env:}`; name the variable to read".into(),
            ));
        }
        match std::env::var(name) {
            Ok(value) => Ok(value),
            Err(std::env::VarError::NotPresent) => Err(RefError(format!(
                "`${{env:{name}}}` is not set; export {name} or change the reference"
            ))),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(RefError(format!("`${{env:{name}}}` is not valid UTF-8")))
            }
        }
    } else {
        // Do not echo the text: a literal secret that merely contains `${` lands here.
        Err(RefError(
            "has a `${...}` that is neither `${file:PATH}` nor `${env:NAME}`; write `$${` for a \
             literal `${`"
                .into(),
        ))
    }
}

/// The largest file a `${file:}` reference may name: secrets and names are a few hundred bytes,
/// and anything without a bound (`/dev/zero`, a growing log) would be read until memory runs out.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Reads a `${file:}` reference, trimming one trailing newline (secret files written with
/// `echo` or an editor end in one, and a token with a newline breaks the HTTP header).
///
/// Only regular files of at most [`MAX_FILE_BYTES`] are read. The size is checked before the
/// read, and the read itself stops one byte past the limit, so a file that grows in between is
/// still bounded. The file's type is checked before opening (opening a FIFO would block until a
/// writer appears) and again on the opened file.
fn read_file(path: &str, base_dir: &Path) -> Result<String, RefError> {
    use std::io::Read;

    let full = base_dir.join(path);
    let resolved = if full.as_os_str() == path {
        String::new()
    } else {
        format!(" (resolved to {})", full.display())
    };
    let fail = |why: String| RefError(format!("`${{file:{path}}}`{resolved} {why}"));
    let check = |meta: &std::fs::Metadata| -> Result<(), RefError> {
        if !meta.is_file() {
            return Err(fail(format!(
                "is not a regular file (it is {}); point it at a file holding the value",
                file_kind(meta)
            )));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(fail(format!(
                "is {} bytes, more than the {MAX_FILE_BYTES}-byte limit of a referenced file;                  point it at a file holding only the value",
                meta.len()
            )));
        }
        Ok(())
    };
    let cannot_read = |e: std::io::Error| fail(format!("cannot be read: {e}"));
    check(&std::fs::metadata(&full).map_err(cannot_read)?)?;
    let file = std::fs::File::open(&full).map_err(cannot_read)?;
    check(&file.metadata().map_err(cannot_read)?)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot_read)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(format!(
            "grew past the {MAX_FILE_BYTES}-byte limit of a referenced file while it was read;              point it at a file holding only the value"
        )));
    }
    let mut text =
        String::from_utf8(bytes).map_err(|_| fail("is not valid UTF-8 text".to_string()))?;
    if text.ends_with("\r\n") {
        text.truncate(text.len() - 2);
    } else if text.ends_with('\n') {
        text.truncate(text.len() - 1);
    }
    Ok(text)
}

/// What a non-regular file is, for the message.
#[cfg(unix)]
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let ty = meta.file_type();
    if ty.is_dir() {
        "a directory"
    } else if ty.is_char_device() {
        "a character device"
    } else if ty.is_block_device() {
        "a block device"
    } else if ty.is_fifo() {
        "a FIFO"
    } else if ty.is_socket() {
        "a socket"
    } else {
        "something else"
    }
}

#[cfg(not(unix))]
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    if meta.is_dir() {
        "a directory"
    } else {
        "something else"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_escaped_values_pass_through() {
        let dir = Path::new("/nonexistent");
        assert_eq!(resolve("plain", dir).unwrap(), "plain");
        assert_eq!(resolve("a$${b}c", dir).unwrap(), "a${b}c");
        assert_eq!(resolve("$$", dir).unwrap(), "$$");
    }

    #[test]
    fn malformed_references_do_not_echo_the_value() {
        let dir = Path::new("/nonexistent");
        let e = resolve("hunter2${oops", dir).unwrap_err();
        assert!(!e.0.contains("hunter2"));
        let e = resolve("hunter2${vault:x}", dir).unwrap_err();
        assert!(!e.0.contains("hunter2"));
    }
}
