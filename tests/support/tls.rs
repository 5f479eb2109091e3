//! A private redis-server serving TLS too, with a certificate for localhost and 127.0.0.1
//! signed by a throw-away CA, for the `rediss://` tests.

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use super::server::RedisServer;

/// Where a server serves TLS, and the CA a client must trust to reach it.
pub struct Tls {
    pub port: u16,
    pub ca: String,
}

/// Makes `server` serve TLS on a port of its own besides its plain one; `None` when it was
/// built without TLS.
pub fn serve_tls(server: &RedisServer) -> Option<Tls> {
    if !built_with_tls(server) {
        return None;
    }
    let dir = server.dir().to_path_buf();
    certificates(&dir);
    let port = TcpListener::bind("127.0.0.1:0")
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
        ("tls-port", &port.to_string()),
    ] {
        let set = server.command(&["CONFIG", "SET", parameter, value]);
        assert_eq!(set, "OK", "{parameter}");
    }
    Some(Tls { port, ca })
}

fn openssl(dir: &Path, args: &[&str]) {
    // Installed on demand, like redis-server (fresh Debian images lack the command).
    let status = Command::new(super::server::ensure_installed("openssl", "openssl"))
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
    let probe = Command::new(super::server::ensure_redis_server())
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
