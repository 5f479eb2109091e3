//! A `rediss://` URL, looked at over TLS.

use super::*;

/// Runs `openssl` in `dir`.
#[cfg(feature = "tls")]
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let status =
        std::process::Command::new(support::server::ensure_installed("openssl", "openssl"))
            .args(args)
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run openssl");
    assert!(status.success(), "openssl {args:?} failed");
}

/// Whether the server can serve TLS, as `tests/tls.rs` tells it: Redis built without TLS has
/// no TLS settings; Valkey has them in every build, and one built without TLS crashes on
/// `CONFIG SET tls-port`, so a server started with a TLS port and missing files is asked
/// first ("Failed finding TLS support" where there is none).
#[cfg(feature = "tls")]
fn built_with_tls(server: &RedisServer) -> bool {
    if server.command(&["CONFIG", "GET", "tls-port"]).is_empty() {
        return false;
    }
    let missing = server.dir().join("no-such-file");
    let missing = missing.to_string_lossy();
    let probe = std::process::Command::new(support::server::ensure_redis_server())
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

#[cfg(feature = "tls")]
#[test]
fn a_rediss_url_is_looked_at_over_tls() {
    let server = RedisServer::start();
    if !built_with_tls(&server) {
        let why = "the server was built without TLS";
        return support::server::skipped("a_rediss_url_is_looked_at_over_tls", why);
    }
    // A throw-away CA and a certificate for 127.0.0.1 signed by it.
    let dir = server.dir().to_path_buf();
    let subject = |name: &str| format!("/CN={name}");
    openssl(
        &dir,
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
            &subject("doctor test CA"),
        ],
    );
    openssl(
        &dir,
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
            &subject("localhost"),
        ],
    );
    std::fs::write(dir.join("ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1").unwrap();
    openssl(
        &dir,
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
    let path = |file: &str| dir.join(file).to_string_lossy().into_owned();
    for (parameter, value) in [
        ("tls-cert-file", path("server.crt")),
        ("tls-key-file", path("server.key")),
        ("tls-ca-cert-file", path("ca.crt")),
        ("tls-auth-clients", "no".into()),
    ] {
        assert_eq!(server.command(&["CONFIG", "SET", parameter, &value]), "OK");
    }
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let set = server.command(&["CONFIG", "SET", "tls-port", &tls_port.to_string()]);
    assert_eq!(set, "OK");

    // The tool trusts the CA through SSL_CERT_FILE, as rustls' root store reads it.
    let output = command_at(
        &format!("rediss://localhost:{tls_port}"),
        &["--json", "doctor"],
    )
    .env("SSL_CERT_FILE", path("ca.crt"))
    .output()
    .unwrap();
    let text = String::from_utf8(output.stdout).unwrap();
    let answer: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(answer["deployment"]["tls"], true, "{answer:#}");
    assert_eq!(
        finding(&answer, "server.version")["severity"],
        "fine",
        "{answer:#}"
    );
    assert!(checks(&answer, "problem").is_empty(), "{answer:#}");
}
