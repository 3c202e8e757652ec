// Real redis-server processes for the redis store's tests: one node, or a cluster of three
// masters with a replica each, on free loopback ports, in a temporary directory. Killed when
// dropped. Users put `#[allow(dead_code)]` on the module.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Node {
    pub port: u16,
    pub dir: PathBuf,
    pub cluster: bool,
    pub child: Option<Child>,
    /// The default user's password (`--requirepass`), which `cli` sends.
    pub password: Option<String>,
}

impl Node {
    pub fn start(dir: &Path, port: u16, cluster: bool) -> Node {
        Node::start_with(dir, port, cluster, None)
    }

    /// One node whose default user needs `password`.
    pub fn start_with_password(dir: &Path, port: u16, password: &str) -> Node {
        Node::start_with(dir, port, false, Some(password.to_string()))
    }

    fn start_with(dir: &Path, port: u16, cluster: bool, password: Option<String>) -> Node {
        let dir = dir.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir).expect("redis dir");
        let mut n = Node {
            port,
            dir,
            cluster,
            child: None,
            password,
        };
        n.restart();
        n
    }

    /// Starts the process again (same port, same directory: a cluster node keeps its config).
    pub fn restart(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--protected-mode")
            .arg("no")
            .arg("--logfile")
            .arg(self.dir.join("redis.log"));
        if let Some(p) = &self.password {
            cmd.arg("--requirepass").arg(p);
        }
        if self.cluster {
            cmd.arg("--cluster-enabled")
                .arg("yes")
                .arg("--cluster-config-file")
                .arg("nodes.conf")
                .arg("--cluster-node-timeout")
                .arg("1000")
                // A replica may always take over (the default refuses one whose link to its
                // master looks old, which a loaded test machine can make it look).
                .arg("--cluster-replica-validity-factor")
                .arg("0")
                // Replicas sync at once (the default waits 5 s for more replicas to share a
                // transfer; one killed master before its replica's first sync has no heir).
                .arg("--repl-diskless-sync-delay")
                .arg("0");
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cli(&["PING"]).trim() != "PONG" {
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn cli(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("redis-cli");
        cmd.arg("-p").arg(self.port.to_string());
        if let Some(p) = &self.password {
            cmd.arg("--no-auth-warning").arg("-a").arg(p);
        }
        let out = cmd.args(args).output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub struct Cluster {
    pub nodes: Vec<Node>,
}

impl Cluster {
    /// Three masters and three replicas, created with `redis-cli --cluster create`.
    pub fn start(dir: &Path) -> Cluster {
        let nodes: Vec<Node> = (0..6)
            .map(|_| Node::start(dir, super::daemon::free_port(), true))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let c = Cluster { nodes };
        c.wait_ok();
        c.wait_replicas();
        c
    }

    pub fn urls(&self) -> String {
        let list: Vec<String> = self.nodes[..3]
            .iter()
            .map(|n| format!("\"redis://127.0.0.1:{}\"", n.port))
            .collect();
        format!("[{}]", list.join(", "))
    }

    /// Every running node says `cluster_state:ok` and sees three masters serving.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let info = n.cli(&["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
            if ok {
                return;
            }
            if Instant::now() >= deadline {
                let states: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("{}: {}", n.port, n.cli(&["CLUSTER", "NODES"])))
                    .collect();
                panic!("cluster not ok after 30 s:\n{}", states.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every replica has finished its sync with its master.
    pub fn wait_replicas(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let synced = self
                .nodes
                .iter()
                .filter(|n| n.cli(&["ROLE"]).starts_with("slave"))
                .filter(|n| {
                    let info = n.cli(&["INFO", "replication"]);
                    info.contains("master_link_status:up")
                        && !info.contains("master_sync_in_progress:1")
                })
                .count();
            if synced == 3 {
                return;
            }
            assert!(Instant::now() < deadline, "replicas not in sync after 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The index of the master serving `key` now.
    pub fn master_of(&self, key: &str) -> usize {
        let any = self
            .nodes
            .iter()
            .find(|n| n.child.is_some())
            .expect("a node");
        let slot: u16 = any
            .cli(&["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("slot");
        let slots = any.cli(&["CLUSTER", "NODES"]);
        for line in slots.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            for range in &f[8..] {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) else {
                    continue;
                };
                if (a..=b).contains(&slot) {
                    let port: u16 = f[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
                    return self.nodes.iter().position(|n| n.port == port).unwrap();
                }
            }
        }
        panic!("no master for slot {slot}:\n{slots}");
    }
}
