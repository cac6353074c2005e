//! The local stand-ins hold whatever a developer loads into them, with no authentication:
//! DynamoDB Local and moto's S3 listen on 127.0.0.1 only (`scripts/services.sh`). The one
//! listener beyond loopback is `scripts/sam-local.sh`'s forwarder, on the Docker bridge's
//! gateway, for its containers, while it runs. The running services are checked in the
//! kernel's own table of listening sockets; the benchmark's and sam-local's, which start only
//! with those tools, by reading their scripts.

use std::path::PathBuf;

fn script(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The body of the shell function `name` in `code`.
fn function<'a>(code: &'a str, name: &str) -> &'a str {
    let start = code
        .find(&format!("\n{name}() {{"))
        .unwrap_or_else(|| panic!("no function {name}"));
    let body = &code[start + 1..];
    &body[..body.find("\n}").expect("the function ends")]
}

/// Every listening TCP socket of this network namespace on `port`, as (address, port) text,
/// read from the kernel's own tables (`/proc/net/tcp` and `tcp6`, state 0A = listening).
fn listeners_on(port: u16) -> Vec<std::net::IpAddr> {
    let mut found = Vec::new();
    for (table, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (cols.get(1), cols.get(3)) else {
                continue;
            };
            let Some((addr, p)) = local.split_once(':') else {
                continue;
            };
            if *state != "0A" || u16::from_str_radix(p, 16).ok() != Some(port) {
                continue;
            }
            found.push(kernel_address(addr, v6));
        }
    }
    found
}

/// The kernel prints an address as 32-bit words in host (little-endian) order.
fn kernel_address(hex: &str, v6: bool) -> std::net::IpAddr {
    let words: Vec<u32> = (0..hex.len() / 8)
        .map(|i| u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16).expect("hex address"))
        .collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    if v6 {
        let b: [u8; 16] = bytes.try_into().expect("16 bytes");
        std::net::IpAddr::from(b)
    } else {
        let b: [u8; 4] = bytes.try_into().expect("4 bytes");
        std::net::IpAddr::from(b)
    }
}

fn is_loopback(a: &std::net::IpAddr) -> bool {
    match a {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[test]
fn dynamodb_local_and_moto_listen_on_loopback_only() {
    let services = tidemark_testkit::services();
    for (name, endpoint) in [
        ("DynamoDB Local", &services.dynamodb_endpoint),
        ("moto's S3", &services.s3_endpoint),
    ] {
        let port: u16 = endpoint
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("an endpoint ends in its port");
        let listeners = listeners_on(port);
        assert!(
            !listeners.is_empty(),
            "{name} listens on port {port} (the kernel lists no listener there)"
        );
        let wide: Vec<_> = listeners.iter().filter(|a| !is_loopback(a)).collect();
        assert!(
            wide.is_empty(),
            "{name} on port {port} listens beyond loopback: {wide:?}"
        );
    }
}

#[test]
fn a_kernel_address_reads_as_written() {
    assert_eq!(
        kernel_address("0100007F", false),
        "127.0.0.1".parse::<std::net::IpAddr>().unwrap()
    );
    assert_eq!(
        kernel_address("00000000", false),
        "0.0.0.0".parse::<std::net::IpAddr>().unwrap()
    );
    assert!(!is_loopback(&kernel_address("00000000", false)));
    assert!(is_loopback(&kernel_address(
        "00000000000000000000000001000000",
        true
    )));
    assert!(is_loopback(&kernel_address(
        "0000000000000000FFFF00000100007F",
        true
    )));
}

#[test]
fn dynamodb_local_starts_through_the_launcher_that_sets_its_address() {
    let services = script("services.sh");
    let ddb = function(&services, "start_dynamodb");
    assert!(ddb.contains("DynamoDBLocalOn 127.0.0.1"), "{ddb}");
    assert!(ddb.contains("-disableTelemetry"), "{ddb}");
}

#[test]
fn the_benchmarks_own_dynamodb_local_listens_on_loopback_too() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/bench/src/local_ddb.rs");
    let code = std::fs::read_to_string(p).expect("read local_ddb.rs");
    assert!(
        code.contains("\"DynamoDBLocalOn\",\n                \"127.0.0.1\","),
        "{code}"
    );
    assert!(
        !code.contains("\"-jar\""),
        "DynamoDB Local's own main listens everywhere"
    );
}

#[test]
fn only_sam_local_listens_wider_on_the_bridge_while_it_runs_and_says_so() {
    let sam = script("sam-local.sh");
    assert!(
        !sam.contains("0.0.0.0"),
        "sam-local binds nothing to every interface"
    );
    let forward = sam
        .lines()
        .find(|l| l.contains("python3 scripts/forward.py"))
        .expect("sam-local forwards the gateway's ports");
    assert!(
        forward.contains("forward.py \"$gw\""),
        "on the bridge's gateway only: {forward}"
    );
    assert!(
        sam.contains("CLEANUP+=(\"kill -- -$fwd_pid"),
        "and only while it runs"
    );
    assert!(
        sam.contains("say \"forwarding $gw"),
        "it says so when it does"
    );
    // The forwarder connects only to loopback.
    let py = script("forward.py");
    assert!(py.contains("open_connection(\"127.0.0.1\", port)"));
}
