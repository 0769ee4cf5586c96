//! The daemon's metrics endpoint: `tarn daemon --metrics ADDR` serves the Prometheus text of
//! every pool it holds ([`tarn_protocol::metrics::render`]) at `http://ADDR/metrics`.
//!
//! # Why hyper, and the bounds
//! The endpoint is a network server inside the process that holds the pools: a client must not
//! be able to stall it or make it grow. It is hyper's HTTP/1 server on a single-threaded tokio
//! runtime in a thread of its own (`metrics`), so the pools never wait on it, with these bounds:
//! - a request's head (request line and headers) is read within [`HEAD_READ_TIMEOUT`], or the
//!   connection is closed: a client that sends a byte now and then (slowloris) holds nothing
//!   for long;
//! - the head is at most [`HEAD_BYTES_MAX`] bytes (hyper's read buffer) and 100 headers, or the
//!   request is answered 431 and closed: an endless header line is never buffered;
//! - a body is never read (only GET is answered), and a whole exchange ends within
//!   [`EXCHANGE_TIMEOUT`] (a client that reads the answer slowly included);
//! - at most [`CONNECTIONS_MAX`] connections are served at once; one more is closed as soon as
//!   it is accepted, so a flood costs a file descriptor for an instant, not a task each.
//!
//! Connections are served concurrently, so one slow client does not delay another. The address
//! is the operator's (`127.0.0.1:9134` keeps it local); the text holds pool names and counters.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tarn_protocol::metrics::{render, PoolMetrics};

/// How long a client has to send its request's head.
pub const HEAD_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read (hyper's smallest read buffer is 8 KiB).
pub const HEAD_BYTES_MAX: usize = 16 << 10;
/// How long a whole exchange may take, the answer's sending included.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once.
pub const CONNECTIONS_MAX: usize = 32;
/// How often the accept loop checks that the daemon still exists.
const OWNER_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Serve `render(collect(owner))` at `http://addr/metrics` from a thread of its own until
/// `owner` is gone. Returns the address bound (port 0 picks one).
pub fn serve<T: Send + Sync + 'static>(
    addr: SocketAddr,
    owner: Weak<T>,
    collect: impl Fn(&T) -> Vec<PoolMetrics> + Send + Sync + 'static,
) -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|error| format!("cannot listen on {addr}: {error}"))?;
    let bound = listener
        .local_addr()
        .map_err(|error| format!("metrics listener: {error}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|error| format!("metrics listener: {error}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|error| format!("metrics runtime: {error}"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || runtime.block_on(accept_loop(listener, owner, Arc::new(collect))))
        .map_err(|error| format!("metrics thread: {error}"))?;
    Ok(bound)
}

async fn accept_loop<T, C>(listener: std::net::TcpListener, owner: Weak<T>, collect: Arc<C>)
where
    T: Send + Sync + 'static,
    C: Fn(&T) -> Vec<PoolMetrics> + Send + Sync + 'static,
{
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            log::error!("metrics: cannot serve: {error}");
            return;
        }
    };
    let connections = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = tokio::time::sleep(OWNER_CHECK_INTERVAL) => {
                if owner.strong_count() == 0 {
                    return;
                }
                continue;
            }
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: wait rather than spin.
                log::warn!("metrics: accept: {error}");
                tokio::time::sleep(OWNER_CHECK_INTERVAL).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            log::warn!("metrics: {peer} refused: {CONNECTIONS_MAX} connections already open");
            continue;
        };
        let (owner, collect) = (owner.clone(), collect.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let answer = answer(&request, || {
                    owner
                        .upgrade()
                        .map(|owner| render(&collect(&owner)))
                        .unwrap_or_default()
                });
                async move { Ok::<_, Infallible>(answer) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_READ_TIMEOUT)
                .max_buf_size(HEAD_BYTES_MAX)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(EXCHANGE_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => log::debug!("metrics: request from {peer}: {error}"),
                Err(_) => log::debug!("metrics: request from {peer}: timed out"),
            }
            drop(permit);
        });
    }
}

/// The answer to one request: `GET /metrics` the text, another path 404, another method 405.
fn answer(request: &Request<Incoming>, body: impl FnOnce() -> String) -> Response<Full<Bytes>> {
    let (status, content_type, text) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body(),
        ),
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics\n".to_string(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "only GET\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    fn sample_pool() -> PoolMetrics {
        PoolMetrics {
            name: "tank".into(),
            arc: Default::default(),
            iostat: tarn::stats::PoolIostat {
                elapsed_ns: 1,
                root: tarn::stats::VdevIostat {
                    name: "tank".into(),
                    size_bytes: Some(1 << 30),
                    allocated_bytes: Some(1 << 20),
                    stats: Default::default(),
                    children: Vec::new(),
                },
            },
            txgs: Vec::new(),
            zil: Vec::new(),
        }
    }

    fn server() -> (Arc<()>, SocketAddr) {
        let owner = Arc::new(());
        let bound = serve(
            "127.0.0.1:0".parse().unwrap(),
            Arc::downgrade(&owner),
            |_: &()| vec![sample_pool()],
        )
        .unwrap();
        (owner, bound)
    }

    fn fetch(bound: SocketAddr, request: &str) -> String {
        let mut stream = TcpStream::connect(bound).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    #[test]
    fn the_server_answers_get_metrics_and_nothing_else() {
        let (_owner, bound) = server();
        let response = fetch(bound, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(response.contains("openmetrics-text"), "{response}");
        assert!(response.contains("node_zfs_arc_hits{zpool=\"tank\"} 0"));
        assert!(response.ends_with("# EOF\n"), "{response}");
        let other = fetch(bound, "GET /other HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        let post = fetch(bound, "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(fetch(bound, "nonsense\r\n\r\n").starts_with("HTTP/1.1 400"));
    }

    /// The hand-written server this replaced read one request at a time and each header line
    /// without a bound: a client that sent part of a request and waited held the endpoint for
    /// everyone (5 s per byte it trickled), and a header line without an end was buffered whole.
    #[test]
    fn a_slow_client_neither_stalls_others_nor_holds_its_connection() {
        let (_owner, bound) = server();
        let mut slow = TcpStream::connect(bound).unwrap();
        slow.write_all(b"GET /metr").unwrap();
        let started = Instant::now();
        let response = fetch(bound, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a request waited {:?} behind a slow client",
            started.elapsed()
        );
        // The slow client's connection is closed once the head's time is up.
        slow.set_read_timeout(Some(HEAD_READ_TIMEOUT * 3)).unwrap();
        let mut rest = Vec::new();
        let closed = slow.read_to_end(&mut rest);
        assert!(
            closed.is_ok(),
            "the slow connection stayed open: {closed:?}"
        );
        assert!(started.elapsed() < HEAD_READ_TIMEOUT * 2);
    }

    #[test]
    fn an_endless_header_is_refused_without_being_buffered() {
        let (_owner, bound) = server();
        let mut stream = TcpStream::connect(bound).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nX-Long: ")
            .unwrap();
        // 64 MiB of one header line: the server must give up long before taking it all.
        let chunk = vec![b'a'; 64 << 10];
        let mut sent = 0usize;
        let refused = loop {
            match stream.write_all(&chunk) {
                Ok(()) => sent += chunk.len(),
                Err(error) => break Some(error),
            }
            if sent >= 64 << 20 {
                break None;
            }
        };
        assert!(
            refused.is_some(),
            "the server took a 64 MiB header line without closing the connection"
        );
        assert!(sent < 8 << 20, "{sent} bytes were taken before the refusal");
        // And it still answers.
        let response = fetch(bound, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    }

    #[test]
    fn connections_past_the_bound_are_closed_at_once_and_service_resumes() {
        let (_owner, bound) = server();
        let idle: Vec<TcpStream> = (0..CONNECTIONS_MAX)
            .map(|_| TcpStream::connect(bound).unwrap())
            .collect();
        // Let the server accept them all.
        std::thread::sleep(Duration::from_millis(300));
        let mut extra = TcpStream::connect(bound).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let _ = extra.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
        let mut response = Vec::new();
        let read = extra.read_to_end(&mut response);
        // Closed (a reset, if the request was still unread), not left waiting nor served.
        let closed = match &read {
            Ok(_) => true,
            Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
        };
        assert!(
            closed && response.is_empty(),
            "a connection past the bound was not closed at once: {read:?} {:?}",
            String::from_utf8_lossy(&response)
        );
        drop(idle);
        std::thread::sleep(Duration::from_millis(300));
        let response = fetch(bound, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    }

    #[test]
    fn the_server_stops_when_its_owner_is_gone() {
        let (owner, bound) = server();
        drop(owner);
        std::thread::sleep(OWNER_CHECK_INTERVAL * 5);
        assert!(TcpStream::connect(bound).is_err(), "still listening");
    }
}
