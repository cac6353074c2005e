//! What a million devices does to the table and the scheduled jobs, by simulation over the
//! in-memory engine (these machines cannot run a million devices): `make bench`, part
//! `scale`, report `bench/SCALE.md`.
//!
//! ```sh
//! cargo run --release -p tidemark-bench --example scale                 # writes bench/SCALE.md
//! cargo run -p tidemark-bench --example scale -- --devices 2000 --out /tmp
//! cargo run -p tidemark-bench --example scale -- --render            # the report again from scale.json
//! ```
//!
//! Part `keys` ([`keys`]): the write rate on each partition key of the table and its
//! indexes across a top of the hour that is also a midnight, with a threshold storm, a mass
//! outage and its return, driven through the real rollups role, alerts role and watchdog.

mod keys;
mod report;

use std::path::PathBuf;

const USAGE: &str = "scale [--devices N] [--shards N] [--write-ms MS] [--out DIR] [--render]

Simulates one stream shard's devices (--devices, 15,625: a million devices over --shards 64
stream shards) through the rollups and alerts roles and the watchdog over the in-memory table,
and writes DIR/SCALE.md (DIR: bench/) and DIR/scale.json. --write-ms: the modelled time of one
write request (6). --render: writes SCALE.md again from DIR/scale.json, simulating nothing.";

struct Args {
    devices: u32,
    shards: u32,
    write_ms: f64,
    out: PathBuf,
    render: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        devices: 15_625,
        shards: 64,
        write_ms: 6.0,
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench"),
        render: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--devices" => a.devices = value()?.parse().map_err(|_| "--devices: a number")?,
            "--shards" => a.shards = value()?.parse().map_err(|_| "--shards: a number")?,
            "--write-ms" => a.write_ms = value()?.parse().map_err(|_| "--write-ms: a number")?,
            "--out" => a.out = PathBuf::from(value()?),
            "--render" => a.render = true,
            "--help" | "-h" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other}\n\n{USAGE}")),
        }
    }
    if a.devices < 100 || a.shards == 0 || a.write_ms <= 0.0 {
        return Err(format!(
            "--devices takes at least 100, --shards and --write-ms more than 0\n\n{USAGE}"
        ));
    }
    Ok(a)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if args.render {
        let json = std::fs::read(args.out.join("scale.json"))
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<keys::KeysPart>(&b).map_err(|e| e.to_string()));
        match json.and_then(|k| {
            std::fs::write(args.out.join("SCALE.md"), report::render(&k)).map_err(|e| e.to_string())
        }) {
            Ok(()) => eprintln!("scale: wrote {}", args.out.join("SCALE.md").display()),
            Err(e) => {
                eprintln!("scale: could not render from {}: {e}", args.out.display());
                std::process::exit(1);
            }
        }
        return;
    }
    let started = std::time::Instant::now();
    let keys = keys::keys_part(keys::Setup {
        devices: args.devices,
        shards: args.shards,
        write_ms: args.write_ms,
        sites: 20,
        window_s: 300,
    })
    .await;
    eprintln!(
        "scale: keys: {} readings, {} rollups and {} alerts batches, {} watchdog runs in {:.0} s",
        keys.readings,
        keys.batches_rollups,
        keys.batches_alerts,
        keys.watchdog_runs,
        started.elapsed().as_secs_f64()
    );
    let text = report::render(&keys);
    if let Err(e) = std::fs::create_dir_all(&args.out)
        .and_then(|()| std::fs::write(args.out.join("SCALE.md"), text))
        .and_then(|()| {
            let json = serde_json::to_vec_pretty(&keys).map_err(std::io::Error::other)?;
            std::fs::write(args.out.join("scale.json"), json)
        })
    {
        eprintln!(
            "scale: could not write the report into {}: {e}",
            args.out.display()
        );
        std::process::exit(1);
    }
    eprintln!("scale: wrote {}", args.out.join("SCALE.md").display());
}
