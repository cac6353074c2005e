//! A DynamoDB Local of the benchmark's own: the shared one on :8000 serves every test of the
//! workspace at once, and its queue would be measured instead of Tidemark. Same jar as
//! `scripts/services.sh` installs (under `.local/`), in memory, on a free loopback port and
//! listening on loopback only (through the same launcher as the shared one), stopped when
//! dropped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Stdio;
use std::time::Duration;

use crate::BenchError;
use crate::artifacts::workspace_root;

pub struct LocalDynamo {
    pub addr: SocketAddr,
    child: tokio::process::Child,
}

impl LocalDynamo {
    /// Starts DynamoDB Local from `.local/dynamodb-local` (run `scripts/services.sh start`
    /// once to install it) and waits until it accepts connections.
    pub async fn start() -> Result<LocalDynamo, BenchError> {
        let local = std::env::var_os("TIDEMARK_LOCAL_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| workspace_root().join(".local"));
        let dir = local.join("dynamodb-local");
        // scripts/DynamoDBLocalOn.java, compiled by `scripts/services.sh install`.
        let launcher = local.join("dynamodb-local-on");
        if !dir.join("DynamoDBLocal.jar").exists()
            || !launcher.join("DynamoDBLocalOn.class").exists()
        {
            return Err(BenchError::Setup(format!(
                "{} has no DynamoDBLocal.jar or {} no launcher: run `scripts/services.sh start` first",
                dir.display(),
                launcher.display()
            )));
        }
        let class_path = format!("DynamoDBLocal.jar:{}", launcher.display());
        let port = TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        let child = tokio::process::Command::new("java")
            .current_dir(&dir)
            .args([
                "-Xmx1g",
                "-Djava.library.path=DynamoDBLocal_lib",
                "-cp",
                &class_path,
                "DynamoDBLocalOn",
                "127.0.0.1",
                "-inMemory",
                "-disableTelemetry",
                "-port",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        for _ in 0..300 {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Ok(LocalDynamo { addr, child });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(BenchError::Setup(format!(
            "DynamoDB Local did not start on {addr} within 30 s"
        )))
    }

    /// Stops it and waits for it to exit.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
