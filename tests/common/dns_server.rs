// A small authoritative DNS server on 127.0.0.1 for the tests: UDP (and TCP for answers too
// large for UDP), records set at run time (A, TXT; an SOA on negative answers, so they are
// cached as a real server's are), and a switch that makes it never answer (the timeout tests).
// Wire format by hickory-proto; the rest is plain std threads.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, SOA, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

#[derive(Default)]
struct State {
    records: Mutex<HashMap<(String, RecordType), Vec<RData>>>,
    silent: AtomicBool,
    stop: AtomicBool,
    queries: AtomicU64,
    log: Mutex<Vec<String>>,
}

pub struct DnsServer {
    pub addr: SocketAddr,
    state: Arc<State>,
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl DnsServer {
    /// Starts on 127.0.0.1, UDP and TCP on the same free port.
    pub fn start() -> DnsServer {
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
            let port = udp.local_addr().unwrap().port();
            if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)) {
                break (udp, tcp);
            }
        };
        let addr = udp.local_addr().unwrap();
        let state = Arc::new(State::default());
        udp.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let s = state.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while !s.stop.load(SeqCst) {
                let Ok((n, peer)) = udp.recv_from(&mut buf) else {
                    continue;
                };
                if let Some(reply) = answer(&s, &buf[..n], Some(1232)) {
                    let _ = udp.send_to(&reply, peer);
                }
            }
        });
        tcp.set_nonblocking(true).unwrap();
        let s = state.clone();
        std::thread::spawn(move || {
            while !s.stop.load(SeqCst) {
                let Ok((mut conn, _)) = tcp.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = conn.set_nonblocking(false);
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                    loop {
                        let mut len = [0u8; 2];
                        if conn.read_exact(&mut len).is_err() {
                            return;
                        }
                        let mut q = vec![0u8; u16::from_be_bytes(len) as usize];
                        if conn.read_exact(&mut q).is_err() {
                            return;
                        }
                        if let Some(reply) = answer(&s, &q, None) {
                            let mut out = (reply.len() as u16).to_be_bytes().to_vec();
                            out.extend_from_slice(&reply);
                            if conn.write_all(&out).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        DnsServer { addr, state }
    }

    /// `[dns]` for a config file that queries this server.
    /// Serves until the process ends (for a server in its own process).
    pub fn wait(&self) {
        while !self.state.stop.load(SeqCst) {
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    pub fn dns_section(&self, budget_ms: u64) -> String {
        format!(
            "[dns]\nenabled = true\nservers = [\"{}\"]\ntimeout_ms = 500\nattempts = 1\nmessage_budget_ms = {budget_ms}\n",
            self.addr
        )
    }

    pub fn txt(&self, name: &str, text: &str) -> &Self {
        // character-strings of at most 255 bytes each (a DKIM key is longer)
        let chunks: Vec<String> = text
            .as_bytes()
            .chunks(255)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect();
        self.add(name, RecordType::TXT, RData::TXT(TXT::new(chunks)));
        self
    }

    pub fn a(&self, name: &str, ip: &str) -> &Self {
        let ip: Ipv4Addr = ip.parse().expect("IPv4");
        self.add(name, RecordType::A, RData::A(A(ip)));
        self
    }

    fn add(&self, name: &str, t: RecordType, data: RData) {
        let mut r = self.state.records.lock().unwrap();
        r.entry((key(name), t)).or_default().push(data);
    }

    /// Stops answering (queries are still read and counted) or starts again.
    pub fn set_silent(&self, silent: bool) {
        self.state.silent.store(silent, SeqCst);
    }

    pub fn queries(&self) -> u64 {
        self.state.queries.load(SeqCst)
    }

    /// Names asked so far (lower-case, without the final dot), with their type.
    pub fn asked(&self) -> Vec<String> {
        self.state.log.lock().unwrap().clone()
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.state.stop.store(true, SeqCst);
    }
}

fn answer(s: &State, query: &[u8], udp_limit: Option<usize>) -> Option<Vec<u8>> {
    let q = Message::from_vec(query).ok()?;
    s.queries.fetch_add(1, SeqCst);
    let question = q.queries.first()?.clone();
    let name = key(&question.name().to_ascii());
    s.log
        .lock()
        .unwrap()
        .push(format!("{name} {}", question.query_type()));
    if s.silent.load(SeqCst) {
        return None;
    }
    let mut m = Message::new(q.metadata.id, MessageType::Response, q.metadata.op_code);
    m.metadata.authoritative = true;
    m.metadata.recursion_desired = q.metadata.recursion_desired;
    m.metadata.recursion_available = true;
    m.add_query(question.clone());
    if let Some(edns) = q.edns.clone() {
        m.set_edns(edns);
    }
    let records = s.records.lock().unwrap();
    let found = records.get(&(name.clone(), question.query_type()));
    match found {
        Some(data) => {
            for d in data {
                m.add_answer(Record::from_rdata(question.name().clone(), 3600, d.clone()));
            }
        }
        None => {
            // NXDOMAIN when the name has no record of any type, else NODATA; an SOA either way.
            let exists = records.keys().any(|(n, _)| *n == name);
            if !exists {
                m.metadata.response_code = ResponseCode::NXDomain;
            }
            let zone = Name::from_ascii("test.").unwrap();
            let soa = SOA::new(
                Name::from_ascii("ns.test.").unwrap(),
                Name::from_ascii("hostmaster.test.").unwrap(),
                1,
                3600,
                600,
                86400,
                3600,
            );
            m.authorities
                .push(Record::from_rdata(zone, 3600, RData::SOA(soa)));
        }
    }
    drop(records);
    let bytes = m.to_vec().ok()?;
    match udp_limit {
        Some(limit) if bytes.len() > limit => {
            let mut t = m.truncate();
            t.metadata.id = q.metadata.id;
            t.to_vec().ok()
        }
        _ => Some(bytes),
    }
}
