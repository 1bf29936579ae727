//! The intents' store-facing rules, against an in-memory store: what a listing reads, skips,
//! remembers and ages out.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use super::listing::{AGE_OUT_MS, LIST_BUDGET, Memory, READS_PER_LISTING, Read, Scope, intent_dir};
use super::record::tests::{UUID, partitioned, record};
use super::signing::IntentKey;
use super::*;
use crate::secret::Secret;

struct Fixture {
    store: Arc<dyn ObjectStore>,
    url: crate::config::TableRoot,
    metadata: iceberg::spec::TableMetadata,
    dir: ObjectPath,
}

fn fixture() -> Fixture {
    let metadata = iceberg::spec::TableMetadataBuilder::new_from_metadata(partitioned(), None)
        .assign_uuid(uuid::Uuid::parse_str(UUID).expect("uuid"))
        .build()
        .expect("metadata")
        .metadata;
    let url = crate::config::TableRoot {
        bucket: "lake".into(),
        prefix: "fleet".into(),
    };
    Fixture {
        store: Arc::new(object_store::memory::InMemory::new()),
        dir: intent_dir(&url, UUID),
        url,
        metadata,
    }
}

impl Fixture {
    async fn put(&self, name: &str, body: Vec<u8>) {
        self.store
            .put(&self.dir.child(name), body.into())
            .await
            .expect("put");
    }

    async fn list(&self, memory: &mut Memory, key: Option<&IntentKey>, now_ms: i64) -> Vec<String> {
        let scope = Scope::of(&self.url, &self.metadata, key);
        let listing = memory
            .list(
                &self.store,
                &scope,
                &self.metadata,
                "t",
                Read::InCycle,
                now_ms,
            )
            .await;
        listing
            .intents
            .iter()
            .map(|(k, _)| k.filename().unwrap_or_default().to_string())
            .collect()
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[tokio::test]
async fn intents_read_while_the_catalog_answers_are_not_read_again() {
    let f = fixture();
    f.put("a-1.json", record("a", &["a1"], 1, None).to_bytes())
        .await;
    f.put("b-1.json", record("b", &["b1"], 1, None).to_bytes())
        .await;
    let mut intents = Intents::new("t".into(), true, true, None);
    intents.warm(&f.store, &f.url, &f.metadata, now_ms()).await;
    // Bodies that would no longer parse: the listing in the next cycle must not read them.
    f.put("a-1.json", b"{}".to_vec()).await;
    f.put("b-1.json", b"{}".to_vec()).await;
    f.put("c-1.json", record("c", &["c1"], 1, None).to_bytes())
        .await;
    let listed = f.list(&mut intents.memory, None, now_ms()).await;
    assert_eq!(listed, ["a-1.json", "b-1.json", "c-1.json"]);
}

#[tokio::test]
async fn junk_that_sorts_first_costs_one_read_and_hides_nothing() {
    let f = fixture();
    // One more than a page of S3's LIST, all sorting before the fleet's intents.
    for i in 0..1_001 {
        f.put(&format!("0-junk-{i:04}.json"), b"not an intent".to_vec())
            .await;
    }
    f.put("a-1.json", record("a", &["a1"], 1, None).to_bytes())
        .await;
    let mut memory = Memory::default();
    // At most READS_PER_LISTING reads a listing, the oldest first: the junk takes two.
    assert!(f.list(&mut memory, None, now_ms()).await.is_empty());
    assert_eq!(f.list(&mut memory, None, now_ms()).await, ["a-1.json"]);
    // Skipped junk is not read again: one that has become a good intent stays unlisted.
    f.put("0-junk-0000.json", record("z", &["z1"], 1, None).to_bytes())
        .await;
    f.put("b-1.json", record("b", &["b1"], 1, None).to_bytes())
        .await;
    assert_eq!(
        f.list(&mut memory, None, now_ms()).await,
        ["a-1.json", "b-1.json"]
    );
}

#[tokio::test]
async fn a_listing_reads_a_bounded_number_of_intents_the_oldest_first() {
    let f = fixture();
    let more = READS_PER_LISTING + 88;
    // Named so that key order is the reverse of age: the oldest sorts last.
    for i in 0..more {
        let lane = format!("{:04}", more - i);
        f.put(
            &format!("{lane}-1.json"),
            record(&lane, &[&lane], 1, None).to_bytes(),
        )
        .await;
    }
    let mut memory = Memory::default();
    let first = f.list(&mut memory, None, now_ms()).await;
    assert_eq!(first.len(), READS_PER_LISTING);
    // The oldest 512 (the last in key order): a commit takes the oldest first.
    assert!(
        first.iter().all(|name| name.as_str() > "0088-1.json"),
        "{first:?}"
    );
    // The next listing reads the rest, and lists all it has read.
    assert_eq!(f.list(&mut memory, None, now_ms()).await.len(), more);
}

#[tokio::test]
async fn a_listing_longer_than_its_budget_goes_on_where_it_stopped() {
    let f = fixture();
    for i in 0..LIST_BUDGET {
        f.put(&format!("0-junk-{i:05}.json"), b"x".to_vec()).await;
    }
    f.put("a-1.json", record("a", &["a1"], 1, None).to_bytes())
        .await;
    let mut memory = Memory::default();
    assert!(f.list(&mut memory, None, now_ms()).await.is_empty());
    assert_eq!(f.list(&mut memory, None, now_ms()).await, ["a-1.json"]);
}

#[tokio::test]
async fn only_this_releases_unusable_intents_age_out() {
    let f = fixture();
    let mut foreign = record("a", &["a1"], 1, None);
    foreign.table_uuid = "another".into();
    f.put("foreign.json", foreign.to_bytes()).await;
    f.put("junk.json", b"not ours".to_vec()).await;
    let mut newer = record("a", &["a2"], 2, None);
    newer.format = "thadam-intent/9".into();
    f.put("newer.json", newer.to_bytes()).await;
    let mut memory = Memory::default();
    let scope = Scope::of(&f.url, &f.metadata, None);
    let young = memory
        .list(&f.store, &scope, &f.metadata, "t", Read::InCycle, now_ms())
        .await;
    assert!(young.aged_out.is_empty() && young.intents.is_empty());
    let later = now_ms() + AGE_OUT_MS + 60_000;
    let old = memory
        .list(&f.store, &scope, &f.metadata, "t", Read::InCycle, later)
        .await;
    let aged: Vec<&str> = old.aged_out.iter().filter_map(|k| k.filename()).collect();
    assert_eq!(aged, ["foreign.json"]);
}

#[tokio::test]
async fn with_a_fleet_key_only_tagged_intents_are_taken() {
    let f = fixture();
    let key = IntentKey::new(&Secret::new("fleet secret"));
    let other = IntentKey::new(&Secret::new("another secret"));
    let r = record("a", &["a1"], 1, None);
    f.put("signed.json", r.to_bytes_signed(Some(&key))).await;
    f.put("unsigned.json", r.to_bytes()).await;
    f.put("wrong.json", r.to_bytes_signed(Some(&other))).await;
    let mut memory = Memory::default();
    assert_eq!(
        f.list(&mut memory, Some(&key), now_ms()).await,
        ["signed.json"]
    );
    // Without a key, a tag is not asked for (nor checked).
    let mut memory = Memory::default();
    assert_eq!(
        f.list(&mut memory, None, now_ms()).await,
        ["signed.json", "unsigned.json", "wrong.json"]
    );
}
