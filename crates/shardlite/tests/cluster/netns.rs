//! Real network faults for the cluster tests: each member (a node, an etcd member, the test's
//! own clients) in a network namespace of its own, made by the test and joined by a veth pair to
//! a bridge in a namespace of its own (the hub); every address exists only on those veths, so no
//! packet leaves the test's namespaces. A cut is `nft` dropping a member's packets to and from
//! others, inside the member's namespace; a heal removes the table. A slow link is `tc tbf` on
//! the member's veth. Everything is removed when
//! the [`Net`] is dropped, on a failure too; namespaces a killed test run left behind are removed
//! by the next.
//!
//! Needs root, `ip` and `nft` (`.ci/netns` installs them); without them the tests print why and
//! pass, unless `SHARDLITE_TEST_NETNS` is set (CI sets it), when they fail.

use std::{
    future::Future,
    io::Write,
    process::{Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
};

/// The prefix of every namespace a test makes: `slt<pid>x<n>-<member>`.
const PREFIX: &str = "slt";

/// A test's namespaces: the hub and the members.
pub struct Net {
    /// `slt<pid>x<n>-`.
    name: String,
    members: Vec<(String, u8)>,
}

impl Net {
    /// Namespaces for `members` (name and last byte of its address in 10.0.0.0/24), or `None`
    /// (after printing why) where this machine cannot make them.
    pub fn create(members: &[(&str, u8)]) -> Option<Self> {
        if let Some(why) = unable() {
            assert!(std::env::var_os("SHARDLITE_TEST_NETNS").is_none(), "SHARDLITE_TEST_NETNS is set, but {why}");
            println!("skipped: {why}");
            return None;
        }
        remove_left_behind();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("{PREFIX}{}x{}-", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let net = Self { name, members: members.iter().map(|(m, at)| ((*m).to_owned(), *at)).collect() };
        let hub = net.ns("hub");
        run(&["ip", "netns", "add", &hub]);
        run(&["ip", "-n", &hub, "link", "add", "br0", "type", "bridge"]);
        run(&["ip", "-n", &hub, "link", "set", "br0", "up"]);
        for (member, _) in &net.members {
            net.join(member);
        }
        Some(net)
    }

    /// Makes `member`'s namespace, its veth to the hub's bridge and its address.
    fn join(&self, member: &str) {
        let (ns, hub, port) = (self.ns(member), self.ns("hub"), format!("v-{member}"));
        run(&["ip", "netns", "add", &ns]);
        run(&["ip", "-n", &hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
        run(&["ip", "-n", &hub, "link", "set", &port, "master", "br0", "up"]);
        run(&["ip", "-n", &ns, "addr", "add", &format!("{}/24", self.ip(member)), "dev", "eth0"]);
        run(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
        run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    }

    /// The namespace of `member`.
    pub fn ns(&self, member: &str) -> String {
        format!("{}{member}", self.name)
    }

    /// The address of `member`.
    pub fn ip(&self, member: &str) -> String {
        let (_, at) = self.members.iter().find(|(m, _)| m == member).unwrap_or_else(|| panic!("no member {member}"));
        format!("10.0.0.{at}")
    }

    /// `program` run inside `member`'s namespace.
    pub fn command(&self, member: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.ns(member)]).arg(program);
        command
    }

    /// Cuts `member` off from each of `others`: their packets to it and its to them are dropped.
    pub fn cut(&self, member: &str, others: &[&str]) {
        let addresses: Vec<String> = others.iter().map(|o| self.ip(o)).collect();
        let set = addresses.join(", ");
        let rules = format!(
            "table inet cut {{\n\
             chain input {{ type filter hook input priority 0; policy accept; ip saddr {{ {set} }} drop; }}\n\
             chain output {{ type filter hook output priority 0; policy accept; ip daddr {{ {set} }} drop; }}\n\
             }}\n"
        );
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &self.ns(member), "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        nft.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        assert!(nft.wait().unwrap().success(), "nft cutting {member} off from {others:?}");
    }

    /// Undoes [`Net::cut`] on `member`.
    pub fn heal(&self, member: &str) {
        run(&["ip", "netns", "exec", &self.ns(member), "nft", "delete", "table", "inet", "cut"]);
    }

    /// Slows `member`'s link down to 1 Mbit/s (`tc tbf` on its veth: what it sends queues).
    pub fn slow(&self, member: &str) {
        let tbf = ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "1mbit", "burst", "32kbit"];
        run(&[&["ip", "netns", "exec", &self.ns(member)], &tbf[..], &["latency", "400ms"]].concat());
    }

    /// Undoes [`Net::slow`] on `member`.
    pub fn unslow(&self, member: &str) {
        run(&["ip", "netns", "exec", &self.ns(member), "tc", "qdisc", "del", "dev", "eth0", "root"]);
    }

    /// Runs `body` on a thread of its own inside `member`'s namespace, on a runtime of its own
    /// (threads and processes started from it are in the namespace too); a panic in it is
    /// this caller's.
    pub fn run<F: Future<Output = ()>>(&self, member: &str, body: impl FnOnce() -> F + Send) {
        let path = format!("/var/run/netns/{}", self.ns(member));
        let joined = std::thread::scope(|scope| {
            let thread = scope.spawn(move || {
                let ns = std::fs::File::open(&path).unwrap();
                nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                let runtime =
                    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap();
                runtime.block_on(body());
            });
            thread.join()
        });
        if let Err(panic) = joined {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (member, _) in &self.members {
            remove(&self.ns(member));
        }
        remove(&self.ns("hub"));
    }
}

/// Why namespaces cannot be made here, if they cannot.
fn unable() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("network namespaces need root".into());
    }
    for tool in [["ip", "-V"], ["nft", "--version"]] {
        if !Command::new(tool[0]).arg(tool[1]).output().is_ok_and(|o| o.status.success()) {
            return Some(format!("no `{}` (Debian: iproute2, nftables)", tool[0]));
        }
    }
    None
}

/// Removes the namespaces of test processes that are gone.
fn remove_left_behind() {
    let Ok(listed) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&listed.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let pid = name.strip_prefix(PREFIX).and_then(|rest| rest.split('x').next()).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
            remove(name);
        }
    }
}

fn remove(ns: &str) {
    let _ = Command::new("ip").args(["netns", "del", ns]).status();
}

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(out.status.success(), "{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}
