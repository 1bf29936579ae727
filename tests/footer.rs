//! The footer reader against the real S3 server: good files decode in at most two reads, and
//! everything else is refused with the object key and the reason.

mod common;

use bytes::Bytes;
use common::{Harness, unique};
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use thadam_iceberg::ErrorCode;
use thadam_iceberg::demo;
use thadam_iceberg::footer::{FIRST_READ_BYTES, MAX_FOOTER_BYTES, read_footer};

async fn put(store: &dyn ObjectStore, key: &str, bytes: Bytes) {
    store
        .put(&ObjectPath::from(key), bytes.into())
        .await
        .expect("upload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_footer_is_read_with_field_ids() {
    let h = Harness::new("footer_ok");
    let key = format!("{}/ok.parquet", unique("footer"));
    let parquet =
        demo::write_parquet(&[demo::telemetry_batch(0, 1234).expect("batch")]).expect("parquet");
    let size = parquet.len() as u64;
    put(h.store.as_ref(), &key, parquet).await;

    let footer = read_footer(h.store.as_ref(), &key, size)
        .await
        .expect("footer");
    assert_eq!(footer.row_count(), 1234);
    assert_eq!(footer.object_size, size);
    // A small file is read in one ranged read of at most FIRST_READ_BYTES.
    assert!(footer.bytes_read <= FIRST_READ_BYTES.min(size));
    let ids: Vec<String> = footer
        .arrow_schema
        .fields()
        .iter()
        .map(|f| {
            f.metadata()
                .get("PARQUET:field_id")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(ids, ["1", "2", "3", "4", "5", "6", "7"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_footer_takes_a_second_read() {
    let h = Harness::new("footer_big");
    let key = format!("{}/wide.parquet", unique("footer"));
    // Many row groups make a footer larger than the first read.
    let batches: Vec<_> = (0..400)
        .map(|n| demo::telemetry_batch(n, 2).expect("batch"))
        .collect();
    let schema = batches[0].schema();
    let mut buf = Vec::new();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(2))
        .build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut buf, schema, Some(props)).expect("writer");
    for b in &batches {
        writer.write(b).expect("write");
    }
    writer.close().expect("close");
    let size = buf.len() as u64;
    put(h.store.as_ref(), &key, Bytes::from(buf)).await;

    let footer = read_footer(h.store.as_ref(), &key, size)
        .await
        .expect("footer");
    assert_eq!(footer.row_count(), 800);
    assert!(footer.bytes_read > FIRST_READ_BYTES, "second read happened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_parquet_object_is_rejected_with_its_key() {
    let h = Harness::new("footer_bad");
    let key = format!("{}/notes.txt", unique("footer"));
    let text: &[u8] = b"this is not a parquet file at all";
    put(h.store.as_ref(), &key, Bytes::from_static(text)).await;
    let err = read_footer(h.store.as_ref(), &key, text.len() as u64)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains(&key), "{err}");
    assert!(err.to_string().contains("PAR1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_file_is_rejected() {
    let h = Harness::new("footer_trunc");
    let key = format!("{}/cut.parquet", unique("footer"));
    let parquet =
        demo::write_parquet(&[demo::telemetry_batch(0, 100).expect("batch")]).expect("parquet");
    // The upload stopped half way: the tail magic is gone.
    let half = parquet.slice(..parquet.len() / 2);
    put(h.store.as_ref(), &key, half.clone()).await;
    let err = read_footer(h.store.as_ref(), &key, half.len() as u64)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains(&key), "{err}");
    // The catalog recorded the full size, but the bucket has half: a size mismatch.
    let err = read_footer(h.store.as_ref(), &key, parquet.len() as u64)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains("recorded"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_footer_length_is_refused_without_reading_it() {
    let h = Harness::new("footer_huge");
    let key = format!("{}/huge.parquet", unique("footer"));
    let mut bytes = b"PAR1".to_vec();
    bytes.extend(std::iter::repeat_n(0u8, 100));
    let claimed = u32::try_from(MAX_FOOTER_BYTES + 1).expect("fits");
    bytes.extend(claimed.to_le_bytes());
    bytes.extend(b"PAR1");
    let size = bytes.len() as u64;
    put(h.store.as_ref(), &key, Bytes::from(bytes)).await;
    let err = read_footer(h.store.as_ref(), &key, size)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains("limit"), "{err}");

    // A length within the limit but past the object's start is a truncated file.
    let key2 = format!("{}/short.parquet", unique("footer"));
    let mut bytes = b"PAR1".to_vec();
    bytes.extend(std::iter::repeat_n(0u8, 10));
    bytes.extend(1000u32.to_le_bytes());
    bytes.extend(b"PAR1");
    let size = bytes.len() as u64;
    put(h.store.as_ref(), &key2, Bytes::from(bytes)).await;
    let err = read_footer(h.store.as_ref(), &key2, size)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FooterInvalid);
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_object_is_reported_with_its_key() {
    let h = Harness::new("footer_404");
    let key = format!("{}/never-uploaded.parquet", unique("footer"));
    let err = read_footer(h.store.as_ref(), &key, 1000)
        .await
        .expect_err("missing");
    assert_eq!(err.code(), ErrorCode::ObjectMissing);
    assert!(err.to_string().contains(&key), "{err}");
}
