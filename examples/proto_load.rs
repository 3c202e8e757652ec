//! A load client for comparing shrike's protocols with one client: `/checkv2` over HTTP/1.1
//! keep-alive (as the Haraka plugin uses it) or with a connection a request (`http-close`), and
//! spamd's `CHECK SPAMC/1.5` and rspamd's legacy `CHECK RSPAMC/1.3` (a connection a request,
//! as spamc and Exim make them).
//!
//! cargo run --release --example proto_load -- ADDR http|http-close|spamd|legacy LIST CONNS SECONDS
//!
//! LIST is a file of message paths, cycled. Prints one line: protocol, messages/s, p50 and
//! p99 latency in ms, errors.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Clone, Copy, PartialEq)]
enum Proto {
    Http,
    HttpClose,
    Spamd,
    Legacy,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 {
        eprintln!("usage: proto_load ADDR http|http-close|spamd|legacy LIST CONNS SECONDS");
        std::process::exit(2);
    }
    let addr = args[1].clone();
    let proto = match args[2].as_str() {
        "http" => Proto::Http,
        "http-close" => Proto::HttpClose,
        "spamd" => Proto::Spamd,
        "legacy" => Proto::Legacy,
        other => panic!("unknown protocol {other}"),
    };
    let messages: Vec<Vec<u8>> = std::fs::read_to_string(&args[3])
        .expect("list")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|p| std::fs::read(p).expect("message"))
        .collect();
    let conns: usize = args[4].parse().expect("connections");
    let secs: u64 = args[5].parse().expect("seconds");
    let requests: Arc<Vec<Vec<u8>>> = Arc::new(
        messages
            .iter()
            .map(|m| {
                let head = match proto {
                    Proto::Http => format!(
                        "POST /checkv2 HTTP/1.1\r\nHost: shrike\r\nContent-Length: {}\r\n\r\n",
                        m.len()
                    ),
                    Proto::HttpClose => format!(
                        "POST /checkv2 HTTP/1.1\r\nHost: shrike\r\nConnection: close\r\n\
                         Content-Length: {}\r\n\r\n",
                        m.len()
                    ),
                    Proto::Spamd => {
                        format!("CHECK SPAMC/1.5\r\nContent-length: {}\r\n\r\n", m.len())
                    }
                    Proto::Legacy => {
                        format!("CHECK RSPAMC/1.3\r\nContent-length: {}\r\n\r\n", m.len())
                    }
                };
                let mut r = head.into_bytes();
                r.extend_from_slice(m);
                r
            })
            .collect(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let next = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..conns {
            let (requests, next, errors, stop, addr) = (
                requests.clone(),
                next.clone(),
                errors.clone(),
                stop.clone(),
                addr.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut keep: Option<TcpStream> = None;
                let mut buf = vec![0u8; 256 * 1024];
                while !stop.load(Relaxed) {
                    let i = next.fetch_add(1, Relaxed) % requests.len();
                    let t = Instant::now();
                    let ok = match proto {
                        Proto::Http => http(&mut keep, &addr, &requests[i], &mut buf).await,
                        _ => once(&addr, &requests[i], &mut buf).await,
                    };
                    if ok {
                        latencies.push(t.elapsed());
                    } else {
                        errors.fetch_add(1, Relaxed);
                        keep = None;
                    }
                }
                latencies
            }));
        }
        tokio::time::sleep(Duration::from_secs(secs)).await;
        stop.store(true, Relaxed);
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.expect("client task"));
        }
        let elapsed = started.elapsed().as_secs_f64();
        all.sort();
        let pct = |p: f64| {
            all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        println!(
            "{} messages/s {:.0} p50_ms {:.2} p99_ms {:.2} errors {}",
            args[2],
            all.len() as f64 / elapsed,
            pct(0.5),
            pct(0.99),
            errors.load(Relaxed)
        );
    });
}

/// One request on a connection of its own; the reply runs to the server's close.
async fn once(addr: &str, request: &[u8], buf: &mut [u8]) -> bool {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return false;
    };
    let _ = s.set_nodelay(true);
    if s.write_all(request).await.is_err() {
        return false;
    }
    let mut got = 0;
    loop {
        match s.read(&mut buf[got..]).await {
            Ok(0) => break,
            Ok(n) => got = (got + n).min(buf.len() - 1),
            Err(_) => return false,
        }
    }
    buf.starts_with(b"SPAMD/1.1 0 EX_OK")
        || buf.starts_with(b"RSPAMD/1.3 0 EX_OK")
        || buf.starts_with(b"HTTP/1.1 200")
}

/// One request on the kept-alive connection (opened when there is none); reads the reply by
/// its Content-Length.
async fn http(keep: &mut Option<TcpStream>, addr: &str, request: &[u8], buf: &mut [u8]) -> bool {
    if keep.is_none() {
        let Ok(s) = TcpStream::connect(addr).await else {
            return false;
        };
        let _ = s.set_nodelay(true);
        *keep = Some(s);
    }
    let Some(s) = keep.as_mut() else {
        return false;
    };
    if s.write_all(request).await.is_err() {
        return false;
    }
    let mut got = 0;
    loop {
        let n = match s.read(&mut buf[got..]).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        got += n;
        let Some(end) = buf[..got].windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while got < end + 4 + length {
            match s.read(&mut buf[got..]).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => got += n,
            }
        }
        return head.starts_with("http/1.1 200");
    }
}
