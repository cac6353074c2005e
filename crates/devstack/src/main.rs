use std::process::ExitCode;

use tidemark_devstack::{LocalConfig, bootstrap};

const USAGE: &str = "usage: tidemark-devstack bootstrap";

#[tokio::main]
async fn main() -> ExitCode {
    let cfg = LocalConfig::from_env();
    match std::env::args().nth(1).as_deref() {
        Some("bootstrap") => match bootstrap(&cfg).await {
            Ok(()) => {
                print_endpoints(&cfg);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tidemark-devstack: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn print_endpoints(cfg: &LocalConfig) {
    println!(
        "Tidemark local stack is up.\n\
         \n  DynamoDB Local   {ddb}   table  {table}\
         \n  Kinesis (mock)   {kin}   stream {stream} ({shards} shards)\
         \n\nReach them with any AWS SDK or CLI (dummy credentials, region us-east-1), e.g.:\
         \n  aws dynamodb scan --endpoint-url {ddb} --table-name {table}\
         \n  aws kinesis put-record --endpoint-url {kin} --stream-name {stream} \\\
         \n      --partition-key sensor_01 --cli-binary-format raw-in-base64-out \\\
         \n      --data '{{\"deviceId\":\"sensor_01\",\"timestamp\":\"2026-04-20T14:00:00Z\",\"temperature\":22.4}}'",
        ddb = cfg.dynamodb_endpoint,
        kin = cfg.kinesis_endpoint,
        table = cfg.table,
        stream = cfg.stream,
        shards = cfg.stream_shards,
    );
}
