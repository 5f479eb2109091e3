//! A `rediss://` URL, looked at over TLS.

use super::*;
#[cfg(feature = "tls")]
use support::tls::serve_tls;

#[cfg(feature = "tls")]
#[test]
fn a_rediss_url_is_looked_at_over_tls() {
    let server = RedisServer::start();
    let Some(tls) = serve_tls(&server) else {
        let why = "the server was built without TLS";
        return support::server::skipped("a_rediss_url_is_looked_at_over_tls", why);
    };
    // The tool trusts the CA through SSL_CERT_FILE, as rustls' root store reads it.
    let output = command_at(
        &format!("rediss://localhost:{}", tls.port),
        &["--json", "doctor"],
    )
    .env("SSL_CERT_FILE", &tls.ca)
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
