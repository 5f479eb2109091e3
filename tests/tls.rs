//! `rediss://` end to end: a private redis-server serving TLS with a throw-away CA.
#![cfg(feature = "tls")]

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redisson_lock::LockClient;
use support::*;

fn openssl(dir: &Path, args: &[&str]) {
    // Installed on demand, like redis-server (fresh Debian images lack the command).
    let status = Command::new(support::server::ensure_installed("openssl", "openssl"))
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run openssl");
    assert!(status.success(), "openssl {args:?} failed");
}

/// A CA and a certificate for localhost/127.0.0.1 signed by it, in `dir`.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=redisson-lock test CA",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(dir.join("ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
    );
}

/// Whether the server can serve TLS. Redis built without TLS has no TLS settings at all.
/// Valkey has them in every build, and one built without TLS crashes on `CONFIG SET
/// tls-port`; asked for a TLS port at start, it says "Failed finding TLS support" and exits
/// (a build with TLS exits too, on the missing certificate files, so the probe never runs).
fn built_with_tls(server: &RedisServer) -> bool {
    if server.command(&["CONFIG", "GET", "tls-port"]).is_empty() {
        return false;
    }
    let missing = server.dir().join("no-such-file");
    let missing = missing.to_string_lossy();
    let probe = Command::new(support::server::ensure_redis_server())
        .args([
            "--port",
            "0",
            "--tls-port",
            "1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--tls-cert-file", &missing, "--tls-key-file", &missing])
        .arg("--dir")
        .arg(server.dir())
        .output()
        .expect("run redis-server");
    !String::from_utf8_lossy(&probe.stdout).contains("Failed finding TLS support")
}

#[tokio::test]
async fn a_rediss_url_locks_over_tls() {
    let server = RedisServer::start();
    if !built_with_tls(&server) {
        let why = "the server was built without TLS";
        return support::server::skipped("a_rediss_url_locks_over_tls", why);
    }
    let dir = server.dir().to_path_buf();
    certificates(&dir);
    let tls_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let path = |file: &str| dir.join(file).to_string_lossy().into_owned();
    let (cert, key, ca) = (path("server.crt"), path("server.key"), path("ca.crt"));
    // One parameter per CONFIG SET, which Redis before 7.0 requires.
    for (parameter, value) in [
        ("tls-cert-file", cert.as_str()),
        ("tls-key-file", &key),
        ("tls-ca-cert-file", &ca),
        ("tls-auth-clients", "no"),
    ] {
        let set = server.command(&["CONFIG", "SET", parameter, value]);
        assert_eq!(set, "OK", "{parameter}");
    }
    assert_eq!(
        server.command(&["CONFIG", "SET", "tls-port", &tls_port.to_string()]),
        "OK"
    );
    // Trust the throw-away CA: rustls' root store honours SSL_CERT_FILE. This binary holds
    // only this test, so the variable touches nothing else.
    std::env::set_var("SSL_CERT_FILE", &ca);

    let client = LockClient::builder()
        .url(&format!("rediss://localhost:{tls_port}"))
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .await
        .expect("TLS connection");
    let lock = client.lock("over-tls").unwrap();
    let me = client.new_owner();
    let guard = lock.lock(&me).await.unwrap();
    // The hold is really in this server (seen through its plain port).
    assert_eq!(server.command(&["HGET", "over-tls", &me.to_string()]), "1");
    // Waiting works over the TLS subscriber connection too.
    let waiter = tokio::spawn(lock.lock(&client.new_owner()));
    subscribed(&server, &lock_channel("over-tls")).await;
    guard.unlock().await.unwrap();
    woken_and_released("waiter", waiter).await;
    client.shutdown().await;

    // A plain-text server behind a rediss:// URL is an error, not a silent downgrade.
    let result = LockClient::builder()
        .url(&format!("rediss://localhost:{}", server.port()))
        .command_timeout(Duration::from_millis(500))
        .build()
        .await;
    assert!(
        result.is_err(),
        "TLS handshake against a plain port must fail"
    );
}
