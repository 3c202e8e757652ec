//! The tests' DNS server (tests/common/dns_server.rs) in a process of its own, for the DNS
//! benchmark (scripts/bench_dns.sh): answers on 127.0.0.1 (UDP and TCP, port free unless
//! given) with the SPF, DKIM and DMARC records of `sender.example` and NXDOMAIN (with an SOA,
//! so it is cached for an hour) for everything else, which is what a DNS list says of most
//! names. Prints its address, then serves until killed.
//!
//!   cargo run --release --example dns_server

#[allow(dead_code)]
#[path = "../tests/common/dns_server.rs"]
mod dns_server;

fn main() {
    let dns = dns_server::DnsServer::start();
    dns.txt("sender.example", "v=spf1 ip4:192.0.2.0/24 -all");
    dns.txt("mail.sender.example", "v=spf1 a mx ip4:192.0.2.0/24 -all");
    dns.txt("_dmarc.sender.example", "v=DMARC1; p=reject");
    dns.a("mail.sender.example", "192.0.2.10");
    println!("{}", dns.addr);
    dns.wait();
}
