//! The registrar's two neighbours: the `from` parquet sink (rules 3 and 15) and the object_store
//! shipper of that sink (rule 4). Both are parsed only as far as the registrar needs: real thadam
//! configs carry more keys than these, and those keys are thadam's business.

use std::collections::HashSet;
use std::path::Path;

use serde_yaml_ng::Value;

use super::field::Ctx;
use super::raw::{RawObjectStore, RawParquet, RawSink};
use super::types::{DatasetConfig, ParquetSource, TableRoot, UnsignedPolicy};
use super::urls;
use crate::error::Result;

/// Finds the sink `from` names (already required non-empty by the caller) and checks it is a
/// parquet sink. `ctx` is the registrar's.
pub(crate) fn find_parquet<'s>(ctx: &Ctx, from: &str, sinks: &'s [RawSink]) -> Result<&'s RawSink> {
    match sinks.iter().find(|s| s.id == from) {
        Some(s) if s.kind == "parquet" => Ok(s),
        Some(s) => Err(ctx.err(
            "config.from",
            format!(
                "sink \"{from}\" is of kind {}, not parquet; name the parquet sink whose segments \
                 the shipper uploads",
                s.kind
            ),
        )),
        None => {
            let parquet: Vec<_> = sinks
                .iter()
                .filter(|s| s.kind == "parquet")
                .map(|s| format!("\"{}\"", s.id))
                .collect();
            let known = if parquet.is_empty() {
                "the file has no parquet sink".to_owned()
            } else {
                format!("parquet sinks: {}", parquet.join(", "))
            };
            Err(ctx.err(
                "config.from",
                format!("no sink has id \"{from}\" ({known}); name a sink of kind parquet"),
            ))
        }
    }
}

/// Rule 15: the parquet sink's directory, catalog and datasets.
pub(crate) fn parquet_source(sink: &RawSink, base_dir: &Path) -> Result<ParquetSource> {
    let ctx = Ctx {
        sink: &sink.id,
        base_dir,
    };
    let raw: RawParquet = ctx.section("config", &sink.config)?;
    let dir = ctx.path("config.dir", raw.dir.as_ref())?.ok_or_else(|| {
        ctx.err(
            "config.dir",
            "is required; set the directory segments are written to",
        )
    })?;
    let catalog = match ctx.path("config.catalog", raw.catalog.as_ref())? {
        Some(catalog) => catalog,
        None => dir.join("segment-catalog.log"),
    };
    let sink_wide = match ctx.text("config.unsigned", raw.unsigned.as_ref())? {
        Some(text) => unsigned_policy(&ctx, "config.unsigned", &text)?,
        None => UnsignedPolicy::default(),
    };
    let datasets = datasets(&ctx, raw.datasets.as_ref(), sink_wide)?;
    Ok(ParquetSource {
        id: sink.id.clone(),
        dir,
        catalog,
        datasets,
    })
}

fn datasets(
    ctx: &Ctx,
    value: Option<&Value>,
    sink_wide: UnsignedPolicy,
) -> Result<Vec<DatasetConfig>> {
    const HOW: &str =
        "list the dataset names, e.g. datasets: [telemetry, {name: events, unsigned: signed}]";
    let items = match value {
        None | Some(Value::Null) => {
            return Err(ctx.err("config.datasets", format!("is required; {HOW}")));
        }
        Some(Value::Sequence(items)) if !items.is_empty() => items,
        Some(Value::Sequence(_)) => {
            return Err(ctx.err("config.datasets", format!("must not be empty; {HOW}")));
        }
        Some(_) => return Err(ctx.err("config.datasets", format!("must be a list; {HOW}"))),
    };
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("config.datasets[{i}]");
        let dataset = match item {
            Value::Mapping(_) => {
                let name_key = format!("{at}.name");
                let name = ctx.required(&name_key, item.get("name"), "give the dataset's name")?;
                let unsigned_key = format!("{at}.unsigned");
                let unsigned = match ctx.text(&unsigned_key, item.get("unsigned"))? {
                    Some(text) => unsigned_policy(ctx, &unsigned_key, &text)?,
                    None => sink_wide,
                };
                DatasetConfig { name, unsigned }
            }
            _ => DatasetConfig {
                name: ctx.required(&at, Some(item), "give the dataset's name")?,
                unsigned: sink_wide,
            },
        };
        if !seen.insert(dataset.name.clone()) {
            return Err(ctx.err(
                &at,
                format!(
                    "dataset \"{}\" is listed twice; dataset names must be unique",
                    dataset.name
                ),
            ));
        }
        out.push(dataset);
    }
    Ok(out)
}

fn unsigned_policy(ctx: &Ctx, key: &str, text: &str) -> Result<UnsignedPolicy> {
    match text {
        "native" => Ok(UnsignedPolicy::Native),
        "signed" => Ok(UnsignedPolicy::Signed),
        other => Err(ctx.err(
            key,
            format!("`{other}` is not an unsigned policy; use native or signed"),
        )),
    }
}

/// Rule 4: the object_store sink that ships `from` must use the registrar's `pipeline`, and its
/// `url` must be the registrar's (after slash normalisation): tables live where the shipper puts
/// the files.
pub(crate) fn check_shipper(
    ctx: &Ctx,
    from: &str,
    pipeline: &str,
    url: &TableRoot,
    sinks: &[RawSink],
) -> Result<()> {
    let mut shippers = Vec::new();
    for sink in sinks.iter().filter(|s| s.kind == "object_store") {
        let sctx = Ctx {
            sink: &sink.id,
            base_dir: ctx.base_dir,
        };
        let raw: RawObjectStore = sctx.section("config", &sink.config)?;
        if sctx.text("config.from", raw.from.as_ref())?.as_deref() != Some(from) {
            continue;
        }
        let their_pipeline = sctx.required(
            "config.pipeline",
            raw.pipeline.as_ref(),
            "set the shipper's pipeline",
        )?;
        let their_url_text = sctx.required(
            "config.url",
            raw.url.as_ref(),
            "set the shipper's s3:// url",
        )?;
        let their_url = urls::table_root(&their_url_text).map_err(|e| sctx.err("config.url", e))?;
        shippers.push((sink.id.as_str(), their_pipeline, their_url));
    }
    if shippers.is_empty() {
        return Err(ctx.err(
            "config.from",
            format!(
                "no object_store sink ships sink \"{from}\" (none has from: {from}); the registrar \
                 registers only shipped segments, so add an object_store sink with from: {from}"
            ),
        ));
    }
    if shippers.iter().any(|(_, p, u)| p == pipeline && u == url) {
        return Ok(());
    }
    // Report against the closest shipper: one with the same pipeline (then the url differs),
    // else the first.
    if let Some((id, _, their_url)) = shippers.iter().find(|(_, p, _)| p == pipeline) {
        return Err(ctx.err(
            "config.url",
            format!(
                "{} is not the url of the object_store sink \"{id}\" that ships \"{from}\" ({}); \
                 tables live where the shipper puts the files, so set url: {}",
                url.uri(),
                their_url.uri(),
                their_url.uri()
            ),
        ));
    }
    let (id, their_pipeline, _) = &shippers[0];
    Err(ctx.err(
        "config.pipeline",
        format!(
            "\"{pipeline}\" is not the pipeline of the object_store sink \"{id}\" that ships \
             \"{from}\" (\"{their_pipeline}\"); set pipeline: {their_pipeline}"
        ),
    ))
}
