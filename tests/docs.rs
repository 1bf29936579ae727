//! The documentation, checked without a server: README.md and every page of `docs/`.
//!
//! - Every markdown link leads somewhere: a relative target names a file or directory that
//!   exists (relative to the page), and a `#anchor` (alone, or after a `.md` path) names a
//!   heading of the target page, by GitHub's anchor rules (lowercase; spaces become `-`; every
//!   character but letters, digits, `-` and `_` is dropped; a repeated heading gets `-1`, `-2`).
//!   Links to `http(s)://` and `mailto:` are not followed. Links inside code (fenced blocks and
//!   inline code spans) are not links.
//! - Every page of `docs/` is in the README's index (the README links to it).
//! - The module map in `docs/operations.md` ("Where things live") lists exactly the `.rs` files
//!   under `src/`.
//!
//! Each test gathers every problem first and fails once, listing all of them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and docs/*.md, as paths relative to the repository.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("a docs/ directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| {
            p.strip_prefix(repo())
                .expect("under the repo")
                .to_path_buf()
        })
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(relative: &Path) -> String {
    std::fs::read_to_string(repo().join(relative))
        .unwrap_or_else(|e| panic!("read {}: {e}", relative.display()))
}

/// The page with everything that is code blanked out: fenced blocks become empty lines and
/// inline code spans spaces, so that line numbers and positions stay those of the page.
/// Returns the prose and, separately, the fenced blocks (first line number, lines).
fn split_code(text: &str) -> (String, Vec<(usize, Vec<String>)>) {
    let mut prose = String::with_capacity(text.len());
    let mut blocks = Vec::new();
    // The open fence: its character, its length, the block's first line and its lines.
    let mut open: Option<(char, usize, usize, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence = trimmed
            .chars()
            .next()
            .filter(|c| *c == '`' || *c == '~')
            .map(|c| (c, trimmed.chars().take_while(|x| *x == c).count()))
            .filter(|(_, n)| *n >= 3);
        match (&mut open, fence) {
            (None, Some((c, n))) => open = Some((c, n, i + 2, Vec::new())),
            (Some((c, n, _, _)), Some((fc, fnum)))
                if fc == *c && fnum >= *n && trimmed.trim_end().chars().all(|x| x == fc) =>
            {
                let (_, _, first, lines) = open.take().expect("an open fence");
                blocks.push((first, lines));
            }
            (Some((_, _, _, lines)), _) => lines.push(line.to_string()),
            (None, None) => prose.push_str(line),
        }
        prose.push('\n');
    }
    (blank_inline_code(&prose), blocks)
}

/// Inline code spans (a run of backticks up to the next run of the same length, across lines
/// too) replaced by spaces; newlines are kept.
fn blank_inline_code(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // The closing run: exactly `run` backticks.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let n = chars[j..].iter().take_while(|c| **c == '`').count();
                if n == run {
                    close = Some(j);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                for c in &mut out[i..end + run] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = end + run;
            }
            None => i += run,
        }
    }
    out.into_iter().collect()
}

/// GitHub's anchor for a heading's text: links keep their label, `*` and backticks go, then
/// lowercase, drop what is not a letter, digit, `-`, `_` or space, and spaces become `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // [label](target) -> label
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](").map(|m| open + m) else {
            break;
        };
        let Some(close) = rest[mid..].find(')').map(|c| mid + c) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..mid]);
        rest = &rest[close + 1..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (ATX headings outside code), with GitHub's suffixes for
/// repeated ones.
fn anchors(text: &str) -> BTreeSet<String> {
    let (prose, _) = split_code(text);
    let mut seen = BTreeSet::new();
    let original: Vec<&str> = text.lines().collect();
    for (i, line) in prose.lines().enumerate() {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || line.len() - trimmed.len() > 3 {
            continue;
        }
        let after = &trimmed[hashes..];
        if !(after.is_empty() || after.starts_with(' ')) {
            continue;
        }
        // The heading's own text (inline code was blanked in `prose`: take it from the page).
        let own = original[i].trim_start()[hashes..]
            .trim()
            .trim_end_matches('#')
            .trim();
        let base = slug(own);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// Every link target of a page, with its line: inline links and images `[label](target)` and
/// reference definitions `[label]: target`, outside code.
fn links(text: &str) -> Vec<(usize, String)> {
    let (prose, _) = split_code(text);
    let mut found = Vec::new();
    let line_of = |pos: usize| prose[..pos].matches('\n').count() + 1;
    let mut from = 0;
    while let Some(at) = prose[from..].find("](").map(|p| from + p) {
        let start = at + 2;
        let target: String = prose[start..]
            .chars()
            .take_while(|c| *c != ')' && !c.is_whitespace())
            .collect();
        found.push((line_of(at), target.trim_matches(['<', '>']).to_string()));
        from = start;
    }
    for (i, line) in prose.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some(end) = trimmed.find("]:")
            && !trimmed[1..end].contains(']')
        {
            let target = trimmed[end + 2..].split_whitespace().next().unwrap_or("");
            found.push((i + 1, target.to_string()));
        }
    }
    found
}

/// Removes `.` and `..` from a relative path (links such as `../README.md`), so that two
/// spellings of one page compare equal.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with one link of `page`, if anything.
fn check_link(page: &Path, target: &str) -> Option<String> {
    if target.starts_with("http://")
        || target.starts_with("https://")
        || target.starts_with("mailto:")
    {
        return None;
    }
    if target.is_empty() {
        return Some("an empty link target".to_string());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        normalise(&page.parent().unwrap_or(Path::new("")).join(path))
    };
    if !repo().join(&file).exists() {
        return Some(format!("{} does not exist", file.display()));
    }
    let anchor = anchor?;
    if file.extension().is_none_or(|e| e != "md") {
        return Some(format!(
            "#{anchor} on {}, which is not a markdown page",
            file.display()
        ));
    }
    let known = anchors(&read(&file));
    if known.contains(anchor) {
        return None;
    }
    // Name the nearest headings, to make a renamed one easy to find.
    let near: Vec<&String> = known
        .iter()
        .filter(|a| {
            a.split('-')
                .any(|w| w.len() > 3 && anchor.split('-').any(|x| x == w))
        })
        .take(5)
        .collect();
    Some(format!(
        "no heading of {} has the anchor #{anchor}{}",
        file.display(),
        if near.is_empty() {
            String::new()
        } else {
            format!(
                " (similar: {})",
                near.iter()
                    .map(|a| format!("#{a}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ))
}

#[test]
fn every_link_in_the_readme_and_the_docs_leads_somewhere() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for (line, target) in links(&read(&page)) {
            checked += 1;
            if let Some(why) = check_link(&page, &target) {
                broken.push(format!("{}:{line}: ({target}): {why}", page.display()));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} links found: is the parser broken?"
    );
    assert!(
        broken.is_empty(),
        "{} broken link(s) in README.md and docs/:\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}

#[test]
fn the_readme_indexes_every_page_of_the_docs() {
    let readme = read(Path::new("README.md"));
    let linked: BTreeSet<PathBuf> = links(&readme)
        .into_iter()
        .map(|(_, t)| normalise(Path::new(t.split('#').next().unwrap_or(""))))
        .collect();
    let missing: Vec<String> = pages()
        .into_iter()
        .skip(1)
        .filter(|p| !linked.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "README.md links to none of these pages (add them to its index): {}",
        missing.join(", ")
    );
}

/// The first sentence of a source file's `//!` doc, for the message that asks for it in the map.
fn first_doc_sentence(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let doc: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .filter(|l| !l.starts_with('#'))
        .collect();
    let joined = doc.join(" ");
    let joined = joined.trim();
    match joined.find(". ") {
        Some(end) => joined[..end].to_string(),
        None => joined.trim_end_matches('.').to_string(),
    }
}

fn source_files(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(repo()).expect("under the repo");
            out.insert(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// The files a module map (a tree drawn with `├── `, `└── `, `│   `) lists, as `src/...` paths.
fn map_files(lines: &[String]) -> Result<BTreeSet<String>, String> {
    let mut files = BTreeSet::new();
    let mut dirs: Vec<String> = Vec::new();
    for line in lines {
        if line.trim().is_empty() {
            continue;
        }
        if line == "src/" {
            dirs = vec!["src".to_string()];
            continue;
        }
        // The prefix is one four-character cell per level: "│   ", "    ", "├── " or "└── ".
        let chars: Vec<char> = line.chars().collect();
        let mut depth = 0;
        while chars.len() >= (depth + 1) * 4 {
            let cell: String = chars[depth * 4..(depth + 1) * 4].iter().collect();
            if matches!(cell.as_str(), "│   " | "    " | "├── " | "└── ") {
                depth += 1;
                if cell == "├── " || cell == "└── " {
                    break;
                }
            } else {
                break;
            }
        }
        let rest: String = chars[depth * 4..].iter().collect();
        let name = rest.split_whitespace().next().unwrap_or("");
        if depth == 0 || name.is_empty() || dirs.is_empty() {
            return Err(format!("a line the map cannot place: {line:?}"));
        }
        // `depth` cells put the entry inside `depth` directories, src/ included.
        if dirs.len() < depth {
            return Err(format!("an entry below a directory not listed: {line:?}"));
        }
        dirs.truncate(depth);
        match name.strip_suffix('/') {
            Some(dir) => dirs.push(dir.to_string()),
            None => {
                files.insert(format!("{}/{name}", dirs.join("/")));
            }
        }
    }
    Ok(files)
}

#[test]
fn the_module_map_lists_every_source_file() {
    let page = Path::new("docs/operations.md");
    let (_, blocks) = split_code(&read(page));
    let (first, lines) = blocks
        .iter()
        .find(|(_, lines)| lines.first().is_some_and(|l| l == "src/"))
        .unwrap_or_else(|| {
            panic!(
                "{} has no module map (a code block starting `src/`)",
                page.display()
            )
        });
    let listed = map_files(lines).unwrap_or_else(|e| panic!("{}:{first}: {e}", page.display()));
    let mut actual = BTreeSet::new();
    source_files(&repo().join("src"), &mut actual);
    let mut problems = Vec::new();
    for file in actual.difference(&listed) {
        problems.push(format!(
            "not in the map: {file} ({})",
            first_doc_sentence(&repo().join(file))
        ));
    }
    for file in listed.difference(&actual) {
        problems.push(format!("in the map, not in the tree: {file}"));
    }
    assert!(
        problems.is_empty(),
        "the module map in {} (line {first}) is out of date:\n  {}",
        page.display(),
        problems.join("\n  ")
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("Exactly once, in detail"), "exactly-once-in-detail");
    assert_eq!(
        slug("Growth over time: `benches/history.sh`"),
        "growth-over-time-bencheshistorysh"
    );
    assert_eq!(slug("Issue #13's targets"), "issue-13s-targets");
    assert_eq!(slug("`--check`"), "--check");
    assert_eq!(slug("Project Nessie 0.99.0"), "project-nessie-0990");
    assert_eq!(
        slug("Micro-benchmarks: `cargo bench --bench registrar`"),
        "micro-benchmarks-cargo-bench---bench-registrar"
    );
    assert_eq!(
        anchors("# A\n\n## A\n\n```\n# not a heading\n```\n\n## A\n"),
        BTreeSet::from(["a".to_string(), "a-1".to_string(), "a-2".to_string()])
    );
    assert_eq!(
        links("[a](x.md) `[b](y.md)` and\n```\n[c](z.md)\n```\n[d]: w.md\n"),
        vec![(1, "x.md".to_string()), (5, "w.md".to_string())]
    );
}
