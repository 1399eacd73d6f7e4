//! Serving a router to callers tether does not control: a slow client cannot hold a
//! connection open without sending its request (a header timeout), no connection lives
//! forever (an age cap), no more than [`Limits::connections`] are open at once (past that, a
//! new connection is closed at once), no one source holds more than [`Limits::per_peer`] of
//! them, and [`Limits::reserved`] more are kept for the trusted sources alone (the kubelet,
//! which probes from its node's address, and the loopback): no client can take the probes'
//! room and have the kubelet restart a healthy tether. axum's own `serve` has none of these.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What a server allows each connection.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections at most (besides the reserved ones).
    pub connections: usize,
    /// Connections only the trusted sources may use, once the others are taken.
    pub reserved: usize,
    /// Connections one untrusted source address may hold at once.
    pub per_peer: usize,
    /// How long a request's headers may take to arrive, from the connection's start or the
    /// end of its previous request.
    pub header_read: Duration,
    /// How long a connection lives at most; a client that keeps it alive opens another.
    pub max_age: Duration,
    /// How long a request may take to be answered.
    pub request: Duration,
}

impl Limits {
    /// For `/metrics` and `/explain`: a Prometheus server or two, and people.
    pub const MAIN: Limits = Limits {
        connections: 64,
        reserved: 0,
        per_peer: 16,
        header_read: Duration::from_secs(5),
        max_age: Duration::from_secs(300),
        request: Duration::from_secs(30),
    };
    /// For the probes: the kubelet, every few seconds.
    pub const HEALTH: Limits = Limits {
        connections: 16,
        reserved: 4,
        per_peer: 4,
        header_read: Duration::from_secs(5),
        max_age: Duration::from_secs(300),
        request: Duration::from_secs(10),
    };
}

/// The sources trusted with the reserved connections: the loopback, and the node's address
/// (`HOST_IP`, from the downward API's `status.hostIP`), where the kubelet's probes come from.
pub fn trusted_sources() -> Vec<IpAddr> {
    let mut trusted = vec![
        IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
    ];
    if let Some(host) = std::env::var("HOST_IP")
        .ok()
        .and_then(|ip| ip.parse::<IpAddr>().ok())
    {
        trusted.push(host);
    }
    trusted
}

/// A connection's place: one of the shared or the reserved, and its source's count.
struct Admitted {
    _permit: tokio::sync::OwnedSemaphorePermit,
    peer: IpAddr,
    peers: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut peers = crate::locks::lock(&self.peers);
        if let Some(n) = peers.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                peers.remove(&self.peer);
            }
        }
    }
}

/// Serves `app` on `listener` within `limits` until the listener fails; `trusted` sources may
/// use the reserved connections and are not held to the per-source cap.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    trusted: Vec<IpAddr>,
) -> std::io::Result<()> {
    let app = app.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            within(limits.request, request, next)
        },
    ));
    let open = Arc::new(Semaphore::new(limits.connections));
    let reserved = Arc::new(Semaphore::new(limits.reserved));
    let peers: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // A connection that failed before it was accepted (reset, out of descriptors):
            // the next one may be fine.
            Err(e) if is_transient(&e) => {
                tracing::debug!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let source = peer.ip().to_canonical();
        let is_trusted = trusted.contains(&source);
        let permit = {
            let mut held = crate::locks::lock(&peers);
            let count = held.entry(source).or_insert(0);
            let permit = if !is_trusted && *count >= limits.per_peer {
                None
            } else if is_trusted {
                reserved
                    .clone()
                    .try_acquire_owned()
                    .or_else(|_| open.clone().try_acquire_owned())
                    .ok()
            } else {
                open.clone().try_acquire_owned().ok()
            };
            if permit.is_some() {
                *count = count.saturating_add(1);
            } else if *count == 0 {
                held.remove(&source);
            }
            permit
        };
        let Some(permit) = permit else {
            tracing::debug!(%peer, limit = limits.connections, per_peer = limits.per_peer, "too many connections: closed");
            drop(stream);
            continue;
        };
        let permit = Admitted {
            _permit: permit,
            peer: source,
            peers: peers.clone(),
        };
        // Handlers may ask who connected (`ConnectInfo`): `/explain` rations its callers by it
        // before it spends a TokenReview on them.
        let service = TowerToHyperService::new(
            app.clone()
                .layer(axum::Extension(axum::extract::ConnectInfo(peer))),
        );
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_read);
            let connection = http.serve_connection(TokioIo::new(stream), service);
            // Past its age the connection is dropped, whatever it is doing.
            let _ = tokio::time::timeout(limits.max_age, connection).await;
            drop(permit);
        });
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || e
        .raw_os_error()
        .is_some_and(|code| code == 23 || code == 24)
}

/// Answers 503 to a request not answered within `limit`.
async fn within(
    limit: Duration,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => super::failure(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            &format!("no answer within {}s", limit.as_secs()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    /// Serves `/ok` and `/slow` (never answers) within `limits` on a free port.
    async fn server(limits: Limits) -> std::net::SocketAddr {
        let app = Router::new()
            .route("/ok", axum::routing::get(|| async { "ok" }))
            .route(
                "/slow",
                axum::routing::get(|| async {
                    std::future::pending::<()>().await;
                    "never"
                }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(serve(listener, app, limits, vec![trusted()]));
        addr
    }

    /// The source the tests trust (the kubelet's stand-in); every other 127.x is untrusted.
    fn trusted() -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 9))
    }

    /// A connection to `addr` from `source`.
    async fn connect_from(source: [u8; 4], addr: std::net::SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind(std::net::SocketAddr::from((source, 0)))
            .expect("bind to the source");
        socket.connect(addr).await.expect("connect")
    }

    /// Whether a request on a new connection from `source` is answered.
    async fn answered_from(source: [u8; 4], addr: std::net::SocketAddr) -> bool {
        let mut next = connect_from(source, addr).await;
        let _ = next
            .write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        read_to_close(&mut next).await.contains("200 OK")
    }

    /// One source cannot hold more than its share, and however many sources fill the shared
    /// connections, the trusted one (the kubelet) still gets its probes answered.
    #[tokio::test]
    async fn no_client_takes_the_room_kept_for_the_probes() {
        let limits = Limits {
            connections: 3,
            reserved: 1,
            per_peer: 2,
            header_read: Duration::from_secs(30),
            ..TEST
        };
        let addr = server(limits).await;
        // One source: two connections held, the third closed at once.
        let _a1 = connect_from([127, 0, 0, 2], addr).await;
        let _a2 = connect_from([127, 0, 0, 2], addr).await;
        let mut a3 = connect_from([127, 0, 0, 2], addr).await;
        assert_eq!(read_to_close(&mut a3).await, "", "past one source's share");
        // Another source takes the last shared connection; a third finds none.
        let _b1 = connect_from([127, 0, 0, 3], addr).await;
        let mut c1 = connect_from([127, 0, 0, 4], addr).await;
        assert_eq!(read_to_close(&mut c1).await, "", "the shared room is full");
        // The trusted source is answered all the same.
        assert!(
            answered_from([127, 0, 0, 9], addr).await,
            "the probe is answered"
        );
    }

    /// Reads until the server closes the connection (or `deadline` passes: a failure);
    /// returns what it sent.
    async fn read_to_close(stream: &mut TcpStream) -> String {
        let mut all = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut all))
            .await
            .expect("the server closed the connection within 10s")
            .expect("read");
        String::from_utf8_lossy(&all).into_owned()
    }

    const TEST: Limits = Limits {
        connections: 2,
        reserved: 0,
        per_peer: 16,
        header_read: Duration::from_millis(300),
        max_age: Duration::from_secs(60),
        request: Duration::from_millis(300),
    };

    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_cut_off() {
        let addr = server(TEST).await;
        let mut slow = TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        let answer = read_to_close(&mut slow).await;
        assert!(!answer.contains("200 OK"), "{answer}");
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_and_room_comes_back() {
        let limits = Limits {
            header_read: Duration::from_secs(30),
            ..TEST
        };
        let addr = server(limits).await;
        let first = TcpStream::connect(addr).await.expect("connect");
        let _second = TcpStream::connect(addr).await.expect("connect");
        let mut third = TcpStream::connect(addr).await.expect("connect");
        // The third is accepted and closed at once, before any request.
        assert_eq!(read_to_close(&mut third).await, "");
        drop(first);
        // Room is back once the first is gone (its close reaches the server first).
        let answered = async {
            loop {
                let mut next = TcpStream::connect(addr).await.expect("connect");
                next.write_all(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await
                    .expect("write");
                let answer = read_to_close(&mut next).await;
                if answer.contains("200 OK") {
                    return answer;
                }
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), answered)
            .await
            .expect("a connection is served again within 10s");
    }

    #[tokio::test]
    async fn a_request_not_answered_in_time_gets_a_503() {
        let addr = server(TEST).await;
        let mut client = TcpStream::connect(addr).await.expect("connect");
        client
            .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let answer = read_to_close(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    }
}
