//! The Redis the examples talk to: `REDIS_URL` when set, else a private redis-server on a free
//! loopback port (stopped when the returned guard is dropped).

#[path = "../../tests/support/server.rs"]
mod server;

pub struct Redis {
    pub url: String,
    _server: Option<server::RedisServer>,
}

pub fn redis() -> Redis {
    match std::env::var("REDIS_URL") {
        Ok(url) => Redis { url, _server: None },
        Err(_) => {
            let server = server::RedisServer::start();
            Redis {
                url: server.url(),
                _server: Some(server),
            }
        }
    }
}
