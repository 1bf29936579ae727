//! Running pyiceberg (the venv's python) against the same catalog and S3 server: an independent
//! reader (and writer) for what the registrar produced.

use std::process::Command;

/// Python prelude: `catalog` connected to the test servers.
pub const PRELUDE: &str = r#"
import json, os, sys
from pyiceberg.catalog import load_catalog
_props = {
    "uri": os.environ["THADAM_TEST_CATALOG_URI"],
    "s3.endpoint": os.environ["THADAM_TEST_S3_ENDPOINT"],
    "s3.access-key-id": os.environ["THADAM_TEST_S3_ACCESS_KEY"],
    "s3.secret-access-key": os.environ["THADAM_TEST_S3_SECRET_KEY"],
    "s3.region": os.environ.get("THADAM_TEST_S3_REGION", "us-east-1"),
    "s3.path-style-access": "true",
}
# A catalog that wants a warehouse or OAuth2 client credentials (SeaweedFS's): see Catalog::py_env.
if os.environ.get("THADAM_TEST_PY_WAREHOUSE"):
    _props["warehouse"] = os.environ["THADAM_TEST_PY_WAREHOUSE"]
if os.environ.get("THADAM_TEST_PY_CREDENTIAL"):
    _props["credential"] = os.environ["THADAM_TEST_PY_CREDENTIAL"]
catalog = load_catalog("rest", **_props)
"#;

/// Runs `script` (after [`PRELUDE`]) with `args` as `sys.argv[1:]`; returns stdout. Panics with
/// stderr when python fails.
pub fn run(script: &str, args: &[&str]) -> String {
    run_bare(&format!("{PRELUDE}\n{script}"), args)
}

/// Sets table properties through pyiceberg (another client, as an operator would).
pub fn set_properties(ident: &str, props: &[(&str, &str)]) {
    let json = serde_json::to_string(
        &props
            .iter()
            .cloned()
            .collect::<std::collections::BTreeMap<_, _>>(),
    )
    .expect("json");
    run(
        r#"
table = catalog.load_table(sys.argv[1])
with table.transaction() as tx:
    tx.set_properties(json.loads(sys.argv[2]))
"#,
        &[ident, &json],
    );
}

/// [`run`] with pyiceberg connected to the catalog at `catalog_uri` (Nessie, a proxy).
pub fn run_in(catalog_uri: &str, script: &str, args: &[&str]) -> String {
    run_program(
        &format!("{PRELUDE}\n{script}"),
        args,
        Some(catalog_uri),
        &[],
    )
}

/// [`run_in`] for `catalog` (reached at `catalog_uri`: its own URI or a proxy's), with what it
/// needs beyond the URI (SeaweedFS's warehouse, credential and S3).
pub fn run_for(catalog: super::Catalog, catalog_uri: &str, script: &str, args: &[&str]) -> String {
    run_program(
        &format!("{PRELUDE}\n{script}"),
        args,
        Some(catalog_uri),
        &catalog.py_env(),
    )
}

/// Runs `program` as it is (no prelude) in the test venv's python; returns stdout. Panics with
/// stderr when python fails.
pub fn run_bare(program: &str, args: &[&str]) -> String {
    run_program(program, args, None, &[])
}

fn run_program(
    program: &str,
    args: &[&str],
    catalog_uri: Option<&str>,
    env: &[(&str, String)],
) -> String {
    let python = std::env::var("THADAM_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("THADAM_TEST_PYTHON is not set: run the tests with scripts/test")
    });
    let mut command = Command::new(python);
    command.arg("-c").arg(program).args(args);
    if let Some(uri) = catalog_uri {
        command.env("THADAM_TEST_CATALOG_URI", uri);
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    let output = command.output().expect("python runs");
    assert!(
        output.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Starts `script` (after [`PRELUDE`]) with `args` as `sys.argv[1:]` in the test venv's python,
/// in the background: stdout and stderr piped, killed if dropped (a test that fails leaves no
/// writer behind).
pub fn spawn(script: &str, args: &[&str]) -> tokio::process::Child {
    let python = std::env::var("THADAM_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("THADAM_TEST_PYTHON is not set: run the tests with scripts/test")
    });
    tokio::process::Command::new(python)
        .arg("-c")
        .arg(format!("{PRELUDE}\n{script}"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python starts")
}

/// What pyiceberg reads of a table's current snapshot.
#[derive(Debug, Clone)]
pub struct View {
    /// Rows of a full scan (`to_arrow`).
    pub rows: u64,
    /// The data files its scan plans, sorted, duplicates included (a file listed twice in the
    /// table's manifests is planned twice).
    pub files: Vec<String>,
}

/// Reads table `ident` (`namespace.name`) with pyiceberg: an independent reader.
pub fn view(ident: &str) -> View {
    view_in(
        &std::env::var("THADAM_TEST_CATALOG_URI").unwrap_or_default(),
        ident,
    )
}

/// [`view`] in the catalog at `catalog_uri`.
pub fn view_in(catalog_uri: &str, ident: &str) -> View {
    view_for(super::Catalog::Fixture, catalog_uri, ident)
}

/// [`view`] in `catalog`, reached at `catalog_uri`.
pub fn view_for(catalog: super::Catalog, catalog_uri: &str, ident: &str) -> View {
    let out = run_for(
        catalog,
        catalog_uri,
        r#"
table = catalog.load_table(sys.argv[1])
files = [t.file.file_path for t in table.scan().plan_files()]
rows = table.scan().to_arrow().num_rows
print(json.dumps({"rows": rows, "files": files}))
"#,
        &[ident],
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("pyiceberg's json");
    let mut files: Vec<String> = v["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f.as_str().expect("a path").to_string())
        .collect();
    files.sort();
    View {
        rows: v["rows"].as_u64().expect("rows"),
        files,
    }
}
