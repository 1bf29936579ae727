//! A REST catalog in the test's own process, on 127.0.0.1, for the transaction's unit tests: it
//! answers `GET /v1/config`, the load of table `ns.t` and its commits, each commit as the test
//! scripted it ([`Answer`]). A commit it applies goes through iceberg's own
//! `TableRequirement::check` and `TableUpdate::apply`, as a catalog does (a failed requirement is
//! a 409); the table's metadata lives in memory (no `metadata.json` is written).
//!
//! HTTP/1.1 by hand over a `TcpListener`, one request per connection (`connection: close`), so
//! that an answer can be lost for real: the connection closes after the commit was applied and
//! before a byte of the answer, and the client cannot tell whether it landed. When `config`
//! advertised `idempotency-key-lifetime`, a commit repeated under a key that was applied is
//! answered with the stored answer and not applied again, as the REST spec asks, unless the test
//! scripted a refusal for it (checked first, as a server checks the caller's rights first).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use iceberg::TableUpdate;
use iceberg::spec::TableMetadata;
use iceberg_catalog_rest::CommitTableRequest;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The table's path (namespace `ns`, table `t`, no prefix).
const TABLE_PATH: &str = "/v1/namespaces/ns/tables/t";

/// How the catalog answers one commit (unscripted commits are [`Answer::Apply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// Applied when its requirements hold (else 409), answered 200 with the new metadata.
    Apply,
    /// Not applied: answered `status` with the REST error body, and `Retry-After` (seconds)
    /// when given.
    Refuse {
        status: u16,
        retry_after: Option<u64>,
    },
    /// Applied, then answered `status` (a 500 from behind the commit).
    ApplyThen(u16),
    /// Applied, then the connection closes with no answer at all.
    ApplyLost,
}

impl Answer {
    /// A 409 `CommitFailedException`: another writer committed first.
    pub(super) const CONFLICT: Answer = Answer::Refuse {
        status: 409,
        retry_after: None,
    };

    /// `status`, not applied, without `Retry-After`.
    pub(super) fn refuse(status: u16) -> Answer {
        Answer::Refuse {
            status,
            retry_after: None,
        }
    }
}

/// A commit request as the catalog received it.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    /// Its `Idempotency-Key`.
    pub key: Option<String>,
    pub body: Vec<u8>,
    /// It changed the table.
    pub applied: bool,
    /// It was answered with the stored answer of an earlier request under the same key.
    pub replayed: bool,
}

impl Seen {
    /// The manifest list of the snapshot the request adds.
    pub(super) fn manifest_list(&self) -> String {
        let request: CommitTableRequest =
            serde_json::from_slice(&self.body).expect("a commit request");
        request
            .updates
            .iter()
            .find_map(|u| match u {
                TableUpdate::AddSnapshot { snapshot } => Some(snapshot.manifest_list().to_string()),
                _ => None,
            })
            .expect("an add-snapshot update")
    }
}

struct State {
    metadata: TableMetadata,
    location: String,
    versions: u32,
    /// `idempotency-key-lifetime` is advertised.
    keys: bool,
    script: VecDeque<Answer>,
    commits: Vec<Seen>,
    loads: usize,
    /// The answer to each key whose commit was applied.
    replies: HashMap<String, Vec<u8>>,
}

/// What to send back on a connection.
enum Reply {
    Answer {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// Close the connection without a word.
    Lost,
}

/// The catalog (see the module docs); its server runs until the test's runtime ends.
#[derive(Clone)]
pub(super) struct FakeCatalog {
    state: Arc<Mutex<State>>,
    /// `http://127.0.0.1:{port}`.
    pub(super) uri: String,
}

impl FakeCatalog {
    /// Serves table `ns.t` holding `metadata`; `keys`: `GET /v1/config` advertises
    /// idempotency keys.
    pub(super) async fn start(metadata: TableMetadata, keys: bool) -> FakeCatalog {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("an address").port();
        let location = format!(
            "{}/metadata/00000-initial.metadata.json",
            metadata.location()
        );
        let catalog = FakeCatalog {
            state: Arc::new(Mutex::new(State {
                metadata,
                location,
                versions: 0,
                keys,
                script: VecDeque::new(),
                commits: Vec::new(),
                loads: 0,
                replies: HashMap::new(),
            })),
            uri: format!("http://127.0.0.1:{port}"),
        };
        let serving = catalog.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serving.clone().serve(socket));
            }
        });
        catalog
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("the catalog's state")
    }

    /// The answers to the next commits, in order.
    pub(super) fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state().script.extend(answers);
    }

    /// The table as the catalog has it now.
    pub(super) fn metadata(&self) -> TableMetadata {
        self.state().metadata.clone()
    }

    /// Replaces the table, as other writers' commits would have changed it.
    pub(super) fn replace(&self, metadata: TableMetadata) {
        let mut state = self.state();
        state.versions += 1;
        state.location = format!(
            "{}/metadata/{:05}-replaced.metadata.json",
            metadata.location(),
            state.versions
        );
        state.metadata = metadata;
    }

    /// Every commit request received, in order.
    pub(super) fn commits(&self) -> Vec<Seen> {
        self.state().commits.clone()
    }

    /// How many times the table was loaded.
    pub(super) fn loads(&self) -> usize {
        self.state().loads
    }

    async fn serve(self, mut socket: TcpStream) {
        let Some(request) = read_request(&mut socket).await else {
            return;
        };
        let reply = self.answer(&request);
        let Reply::Answer {
            status,
            headers,
            body,
        } = reply
        else {
            // Dropped here: the client sees the connection close before any answer.
            return;
        };
        let mut head = format!(
            "HTTP/1.1 {status} Fake\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&body);
        let _ = socket.write_all(&bytes).await;
        let _ = socket.shutdown().await;
    }

    fn answer(&self, request: &Request) -> Reply {
        let path = request.path.split('?').next().unwrap_or_default();
        let mut state = self.state();
        match (request.method.as_str(), path) {
            ("GET", "/v1/config") => {
                let mut config = json!({"defaults": {}, "overrides": {}});
                if state.keys {
                    config["idempotency-key-lifetime"] = json!("PT30M");
                }
                ok(&config)
            }
            ("GET", TABLE_PATH) => {
                state.loads += 1;
                ok(&json!({
                    "metadata-location": state.location,
                    "metadata": state.metadata,
                    "config": {},
                }))
            }
            ("POST", TABLE_PATH) => state.commit(request.key.clone(), request.body.clone()),
            _ => error(404, "NoSuchTableException", "no such thing here", None),
        }
    }
}

impl State {
    fn commit(&mut self, key: Option<String>, body: Vec<u8>) -> Reply {
        // A scripted refusal comes before the key is looked up: a server checks the caller's
        // rights and the request before it replays an answer.
        if let Some(Answer::Refuse {
            status,
            retry_after,
        }) = self.script.front().copied()
        {
            self.script.pop_front();
            self.commits.push(Seen {
                key,
                body,
                applied: false,
                replayed: false,
            });
            return refusal(status, retry_after);
        }
        if let Some(stored) = key.as_ref().and_then(|k| self.replies.get(k)).cloned() {
            self.commits.push(Seen {
                key,
                body,
                applied: false,
                replayed: true,
            });
            return Reply::Answer {
                status: 200,
                headers: Vec::new(),
                body: stored,
            };
        }
        let answer = self.script.pop_front().unwrap_or(Answer::Apply);
        let request: CommitTableRequest = serde_json::from_slice(&body).expect("a commit request");
        let applied = self.apply(request);
        self.commits.push(Seen {
            key: key.clone(),
            body,
            applied: applied.is_ok(),
            replayed: false,
        });
        let answered = match applied {
            Ok(answered) => answered,
            Err(refused) => return refused,
        };
        if let Some(key) = key {
            self.replies.insert(key, answered.clone());
        }
        match answer {
            Answer::ApplyThen(status) => refusal(status, None),
            Answer::ApplyLost => Reply::Lost,
            Answer::Apply | Answer::Refuse { .. } => Reply::Answer {
                status: 200,
                headers: Vec::new(),
                body: answered,
            },
        }
    }

    /// Checks the requirements and applies the updates (iceberg's own rules); the body of the
    /// 200 answer, or the refusal (409 for a failed requirement, 400 for updates that do not
    /// apply).
    fn apply(&mut self, request: CommitTableRequest) -> Result<Vec<u8>, Reply> {
        for requirement in &request.requirements {
            if let Err(e) = requirement.check(Some(&self.metadata)) {
                return Err(error(409, "CommitFailedException", e.message(), None));
            }
        }
        let invalid = |e: iceberg::Error| error(400, "BadRequestException", e.message(), None);
        let mut builder = self
            .metadata
            .clone()
            .into_builder(Some(self.location.clone()));
        for update in request.updates {
            builder = update.apply(builder).map_err(invalid)?;
        }
        let built = builder.build().map_err(invalid)?;
        self.versions += 1;
        self.location = format!(
            "{}/metadata/{:05}-{}.metadata.json",
            built.metadata.location(),
            self.versions,
            uuid::Uuid::new_v4()
        );
        self.metadata = built.metadata;
        Ok(serde_json::to_vec(&json!({
            "metadata-location": self.location,
            "metadata": self.metadata,
        }))
        .expect("an answer"))
    }
}

fn ok(body: &serde_json::Value) -> Reply {
    Reply::Answer {
        status: 200,
        headers: Vec::new(),
        body: serde_json::to_vec(body).expect("JSON"),
    }
}

/// A refused commit, with the REST spec's exception type for its status.
fn refusal(status: u16, retry_after: Option<u64>) -> Reply {
    let kind = match status {
        400 => "BadRequestException",
        403 => "ForbiddenException",
        404 => "NoSuchTableException",
        409 => "CommitFailedException",
        503 => "ServiceUnavailableException",
        _ => "CommitStateUnknownException",
    };
    error(status, kind, "scripted by the test", retry_after)
}

/// The REST spec's `ErrorModel`.
fn error(status: u16, kind: &str, message: &str, retry_after: Option<u64>) -> Reply {
    let body = json!({"error": {"message": message, "type": kind, "code": status}});
    Reply::Answer {
        status,
        headers: retry_after
            .map(|s| ("retry-after", s.to_string()))
            .into_iter()
            .collect(),
        body: serde_json::to_vec(&body).expect("JSON"),
    }
}

struct Request {
    method: String,
    path: String,
    key: Option<String>,
    body: Vec<u8>,
}

/// One request: its head, then `content-length` bytes of body. `None` when the connection
/// closes first.
async fn read_request(socket: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let mut length = 0;
    let mut key = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "idempotency-key" => key = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Request {
        method,
        path,
        key,
        body,
    })
}
