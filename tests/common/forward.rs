//! A TCP forwarder that can be started late: a catalog that is "down" until the test says so.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A free port on 127.0.0.1 with nothing listening on it (yet).
pub fn reserve_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Forwards connections on `127.0.0.1:port` to `upstream` until dropped.
pub struct Forward {
    task: JoinHandle<()>,
}

impl Forward {
    pub async fn start(port: u16, upstream: SocketAddr) -> Forward {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind forward port");
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Forward { task }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `host:port` of an `http://host:port` URL.
pub fn socket_of(url: &str) -> SocketAddr {
    let u = url::Url::parse(url).expect("url");
    let host = u.host_str().expect("host");
    let port = u.port().expect("port");
    format!("{host}:{port}").parse().expect("socket addr")
}
