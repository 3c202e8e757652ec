//! A TCP proxy that holds every byte for a fixed delay in each direction: the network delay of
//! the MX farm (scripts/mx_farm.sh) where the kernel has no `netem` qdisc. Order is kept and
//! nothing is dropped; a chunk read at t is written at t + delay (or later if the peer is slow).
//! Plain threads and `thread::sleep` (nanosleep): a timer wheel of 1 ms ticks, as an async
//! runtime's, would round a 0.25 ms delay up to a millisecond or more.
//!
//!   cargo run --release --example delay_proxy -- DELAY_US LISTEN TARGET [LISTEN TARGET]...

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let mut out = to.try_clone().expect("clone a socket");
    let writer = thread::spawn(move || {
        for (at, bytes) in rx {
            let due = at + delay;
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            if out.write_all(&bytes).is_err() {
                return;
            }
        }
        let _ = out.shutdown(Shutdown::Write);
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.join();
    let _ = to.flush();
}

fn serve(listen: String, target: String, delay: Duration) {
    let listener = TcpListener::bind(&listen).unwrap_or_else(|e| panic!("listen on {listen}: {e}"));
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let target = target.clone();
        thread::spawn(move || {
            let Ok(server) = TcpStream::connect(&target) else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (c2, s2) = match (client.try_clone(), server.try_clone()) {
                (Ok(c), Ok(s)) => (c, s),
                _ => return,
            };
            let up = thread::spawn(move || pump(client, server, delay));
            pump(s2, c2, delay);
            let _ = up.join();
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 || !(args.len() - 1).is_multiple_of(2) {
        eprintln!("usage: delay_proxy DELAY_US LISTEN TARGET [LISTEN TARGET]...");
        std::process::exit(2);
    }
    let delay = Duration::from_micros(args[0].parse().expect("DELAY_US is a number"));
    let servers: Vec<_> = args[1..]
        .chunks(2)
        .map(|p| {
            let (l, t) = (p[0].clone(), p[1].clone());
            thread::spawn(move || serve(l, t, delay))
        })
        .collect();
    for s in servers {
        let _ = s.join();
    }
}
