//! The command line, parsed by clap: `--help` for the tool and each command, and an error
//! that names the flag for a missing or malformed value.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use tidemark_schema::{DeviceId, Tag, Timestamp};

/// Operator commands for Tidemark's table: repairs after incidents.
///
/// TABLE_NAME names the table (default tidemark).
#[derive(Debug, Parser)]
#[command(name = "tidemark-admin", version)]
pub struct Cli {
    /// Use `make run`'s local stack (TIDEMARK_DYNAMODB_PORT, TIDEMARK_KINESIS_PORT, …)
    /// instead of the AWS account and region of your credentials.
    #[arg(long, global = true)]
    pub local: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Recompute a device's hourly and daily rollups of whole days exactly from its raw
    /// readings; safe while the pipeline runs.
    Rebuild {
        /// The device whose rollups to rebuild.
        #[arg(long, value_parser = device)]
        device: DeviceId,
        /// The first day to rebuild: any time in it (RFC 3339).
        #[arg(long, value_parser = time)]
        from: Timestamp,
        /// The last day to rebuild: any time in it (RFC 3339).
        #[arg(long, value_parser = time)]
        to: Timestamp,
    },
    /// Export the closed hours of a range to Parquet in S3 (readings and hourly rollups, with
    /// a manifest per hour), as the scheduled exporter writes them; an hour exported before
    /// is replaced by identical objects, or by its current content. It walks every registered
    /// device's hour as well as those the rollups role recorded, so it backfills hours older
    /// than the activity index too.
    Export {
        /// Export the hours starting at or after this time (RFC 3339).
        #[arg(long, value_parser = time)]
        from: Timestamp,
        /// ... and before this one (RFC 3339); hours still open are left out.
        #[arg(long, value_parser = time)]
        to: Timestamp,
        /// The bucket to write to (make run: any name; it is created in the local S3).
        #[arg(long)]
        bucket: String,
        /// The key prefix (as the template's ExportPrefix).
        #[arg(long, default_value = "tidemark")]
        prefix: String,
    },
    /// Handle on-failure records again: ingest's are re-read from Kinesis and fed through
    /// ingest, the aggregator's become rebuilds of the devices they touched; handled files
    /// move to a redriven/ folder. With --set-aside: the records the pipeline set aside
    /// (the quarantine's `unprocessable` records) are fed through ingest again, and each one
    /// stored leaves the quarantine.
    Redrive {
        /// Files or folders of on-failure records.
        #[arg(default_value = ".local/onfailure")]
        paths: Vec<PathBuf>,
        /// Re-drive the set-aside records instead of on-failure files.
        #[arg(long, conflicts_with = "paths")]
        set_aside: bool,
        /// With --set-aside: the last this many UTC days, today included (the quarantine
        /// keeps 14).
        #[arg(long, default_value_t = 14, requires = "set_aside", value_parser = clap::value_parser!(u32).range(1..=14))]
        days: u32,
    },
    /// Set a group's member counts from its tag index (for devices tagged before the
    /// counts existed; PUT /devices/{id} keeps them from then on). Run it when the group's
    /// registrations are quiet: one landing meanwhile is miscounted by one.
    CountMembers {
        /// The group: a tag, key:value (site:A).
        #[arg(long, value_parser = group)]
        group: Tag,
    },
}

fn group(v: &str) -> Result<Tag, String> {
    Tag::parse(v).map_err(|e| e.to_string())
}

fn device(v: &str) -> Result<DeviceId, String> {
    DeviceId::new(v).map_err(|e| e.to_string())
}

fn time(v: &str) -> Result<Timestamp, String> {
    Timestamp::parse_rfc3339(v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(std::iter::once("tidemark-admin").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_commands_parse_with_local_anywhere() {
        let cli = parse(&[
            "rebuild",
            "--device",
            "sensor_01",
            "--from",
            "2026-04-20T00:00:00Z",
            "--to",
            "2026-04-21T00:00:00Z",
            "--local",
        ])
        .unwrap();
        assert!(cli.local);
        let Command::Rebuild { device, from, .. } = cli.command else {
            panic!("{:?}", cli.command);
        };
        assert_eq!(device.as_str(), "sensor_01");
        assert_eq!(
            from,
            Timestamp::parse_rfc3339("2026-04-20T00:00:00Z").unwrap()
        );
        let cli = parse(&["--local", "redrive"]).unwrap();
        let Command::Redrive { paths, .. } = cli.command else {
            panic!();
        };
        assert_eq!(paths, [PathBuf::from(".local/onfailure")]);
    }

    #[test]
    fn errors_name_the_flag() {
        let rebuild = |device: Option<&str>, from: &str| {
            let mut args = vec!["rebuild", "--from", from, "--to", "2026-04-21T00:00:00Z"];
            if let Some(d) = device {
                args.extend(["--device", d]);
            }
            parse(&args).unwrap_err()
        };
        let e = rebuild(Some("d"), "yesterday");
        assert!(e.contains("--from"), "{e}");
        let e = rebuild(None, "2026-04-20T00:00:00Z");
        assert!(e.contains("--device"), "{e}");
        let e = rebuild(Some("DEVICE#x"), "2026-04-20T00:00:00Z");
        assert!(e.contains("--device"), "{e}");
        let e = parse(&["rebiuld"]).unwrap_err();
        assert!(e.contains("rebiuld"), "{e}");
    }

    #[test]
    fn export_takes_a_range_a_bucket_and_a_prefix() {
        let cli = parse(&[
            "--local",
            "export",
            "--from",
            "2026-04-20T00:00:00Z",
            "--to",
            "2026-04-21T00:00:00Z",
            "--bucket",
            "lake",
        ])
        .unwrap();
        let Command::Export { bucket, prefix, .. } = cli.command else {
            panic!();
        };
        assert_eq!((bucket.as_str(), prefix.as_str()), ("lake", "tidemark"));
        let e = parse(&[
            "export",
            "--from",
            "2026-04-20T00:00:00Z",
            "--to",
            "2026-04-21T00:00:00Z",
        ])
        .unwrap_err();
        assert!(e.contains("--bucket"), "{e}");
    }

    #[test]
    fn every_command_has_help() {
        Cli::command().debug_assert();
        for sub in ["rebuild", "redrive", "export"] {
            let e = parse(&[sub, "--help"]).unwrap_err();
            assert!(e.contains("Usage: tidemark-admin"), "{e}");
        }
        let e = parse(&["rebuild", "--help"]).unwrap_err();
        for flag in ["--device", "--from", "--to", "--local"] {
            assert!(e.contains(flag), "{flag}: {e}");
        }
    }
}
