//! The local stand-ins hold whatever a developer loads into them, with no authentication:
//! DynamoDB Local and moto's S3 listen on 127.0.0.1 only (`scripts/services.sh`). The one
//! listener beyond loopback is `scripts/sam-local.sh`'s forwarder, on the Docker bridge's
//! gateway, for its containers, while it runs. (Checked by reading the scripts: a test that
//! restarted the shared services would disturb every other test using them.)

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

#[test]
fn dynamodb_local_and_moto_listen_on_loopback_only() {
    let services = script("services.sh");
    let ddb = function(&services, "start_dynamodb");
    assert!(
        ddb.contains("DynamoDBLocalOn 127.0.0.1"),
        "DynamoDB Local starts through the launcher that sets its address:\n{ddb}"
    );
    assert!(
        !ddb.contains("-jar DynamoDBLocal.jar"),
        "DynamoDB Local's own main listens on every interface:\n{ddb}"
    );
    assert!(ddb.contains("-disableTelemetry"), "{ddb}");
    let moto = function(&services, "start_moto");
    assert!(moto.contains("-H 127.0.0.1"), "{moto}");
    for wide in ["0.0.0.0", "-H \"$", "-H $"] {
        assert!(
            !services.contains(wide),
            "services.sh has no address setting but loopback ({wide})"
        );
    }
    // The launcher sets the address it is given on every connector before the server starts.
    let launcher = script("DynamoDBLocalOn.java");
    let set = launcher
        .find("\"setHost\"")
        .expect("sets the connectors' host");
    let start = launcher
        .find("getMethod(\"start\")")
        .expect("starts the server");
    assert!(
        set < start,
        "the address is set before the server opens its port"
    );
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
