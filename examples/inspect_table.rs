//! Reads a registered table back through the Iceberg Rust client and summarises it: snapshots,
//! data files, rows, and the schema with its field IDs.
//!
//! ```text
//! cargo run --example inspect_table -- --config thadam.yaml [--dataset telemetry]
//! ```

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Parser;
use futures::TryStreamExt;
use thadam_iceberg::config::Config;
use thadam_iceberg::testing::TableName;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    config: PathBuf,
    #[arg(long)]
    dataset: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let config = Config::load(&args.config)?;
    let registrar = config.registrars.first().ok_or("no iceberg sink")?;
    let client = thadam_iceberg::testing::connect(registrar).await?;
    let datasets: Vec<String> = match args.dataset {
        Some(d) => vec![d],
        None => registrar
            .source
            .datasets
            .iter()
            .map(|d| d.name.clone())
            .collect(),
    };
    for dataset in datasets {
        let name = TableName {
            namespace: registrar.namespace.clone(),
            name: dataset,
        };
        let Some(table) = client.load_table(&name).await? else {
            println!("table {name}: does not exist");
            continue;
        };
        let metadata = table.metadata();
        let files: BTreeSet<String> = table
            .scan()
            .build()?
            .plan_files()
            .await?
            .map_ok(|task| task.data_file_path().to_string())
            .try_collect()
            .await?;
        let batches: Vec<_> = table
            .scan()
            .build()?
            .to_arrow()
            .await?
            .try_collect()
            .await?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        println!("table {name}");
        println!("  location:    {}", metadata.location());
        println!("  snapshots:   {}", metadata.snapshots().count());
        println!("  data files:  {}", files.len());
        println!("  rows:        {rows}");
        println!("  schema (id {}):", metadata.current_schema_id());
        for field in metadata.current_schema().as_struct().fields() {
            println!(
                "    {:>3}  {:<16} {}{}",
                field.id,
                field.name,
                field.field_type,
                if field.required { " (required)" } else { "" }
            );
        }
    }
    Ok(())
}
