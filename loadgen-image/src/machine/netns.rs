//! Whether the network namespace a shard reads its kernel counters in ([`super::netstat`]) is
//! shared with processes that are not this run's, so that the counters move with theirs: a
//! local run on a host whose other programs (another test, a browser, sshd) open, drop and
//! reset connections meanwhile. A pod's namespace holds only its own containers.
//!
//! Said machine-wide when either tells (each is cheap: two small files, and the listening
//! sockets at the head of `/proc/net/tcp`):
//!
//! - **kernel threads live in it**: PID 2 is `kthreadd` and its namespace is ours. Kernel
//!   threads run in the host's initial namespace, and PID 2 is `kthreadd` only in the host's
//!   PID namespace; reading another process's namespace link needs its owner's uid or
//!   CAP_SYS_PTRACE, so this tells for root.
//! - **another user listens in it**: a listening socket whose owner is not this process's
//!   effective uid (sshd, a resolver, a sidecar proxy). Readable by anyone, so it tells for a
//!   run that is not root.
//!
//! Neither sees a namespace shared only with this user's other processes that listen nowhere
//! (as root: with root's): their counters are then taken for the run's own, as before.

use super::netstat::Proc;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use wsload_report::kernel::Netns;

/// PID 2's name where PID 2 is the kernel's thread spawner: in the host's PID namespace.
const KERNEL_THREADS: &str = "kthreadd";

/// `/proc/net/tcp`'s state of a listening socket (TCP_LISTEN, in hex).
const LISTEN: &str = "0A";

impl Proc {
    /// Whether `netns` is shared with processes other than this run's (see the module's doc).
    pub fn machine_wide(&self, netns: &Netns) -> bool {
        self.holds_kernel_threads(netns) || self.others_listen()
    }

    fn holds_kernel_threads(&self, netns: &Netns) -> bool {
        let spawner = self
            .read("2/comm")
            .is_some_and(|name| name.trim() == KERNEL_THREADS);
        spawner && std::fs::metadata(self.path("2/ns/net")).is_ok_and(|m| m.ino() == netns.inode)
    }

    /// Whether a listening socket of this namespace belongs to another user.
    fn others_listen(&self) -> bool {
        let Some(uid) = self.effective_uid() else {
            return false;
        };
        ["net/tcp", "net/tcp6"]
            .iter()
            .any(|table| self.foreign_listener(table, uid))
    }

    /// The second of `/proc/self/status`'s `Uid:` values.
    fn effective_uid(&self) -> Option<u32> {
        let status = self.read("self/status")?;
        let line = status.lines().find(|l| l.starts_with("Uid:"))?;
        line.split_whitespace().nth(2)?.parse().ok()
    }

    /// Reads `table` only as far as its listening sockets, which the kernel lists first (its
    /// listening hash before the established one), so a table of 100,000 connections costs
    /// no more than an idle one.
    fn foreign_listener(&self, table: &str, uid: u32) -> bool {
        let Ok(file) = std::fs::File::open(self.path(table)) else {
            return false;
        };
        for line in BufReader::new(file).lines().skip(1) {
            let Ok(line) = line else {
                return false;
            };
            // sl local remote st tx:rx tr:when retrnsmt uid timeout inode ...
            let mut fields = line.split_whitespace().skip(3);
            let state = fields.next();
            let owner = fields.nth(3).and_then(|u| u.parse::<u32>().ok());
            if state != Some(LISTEN) {
                return false;
            }
            if owner.is_some_and(|owner| owner != uid) {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use crate::machine::netstat::tests::Tree;

    /// The head of a `/proc/net/tcp`: `listeners` (port, uid) then one established socket
    /// and a time-wait one (owned by nobody: uid 0, inode 0).
    fn table(listeners: &[(u16, u32)]) -> String {
        let mut t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n".to_string();
        for (i, (port, uid)) in listeners.iter().enumerate() {
            t.push_str(&format!(
                "   {i}: 00000000:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000 {uid:>5}        0 {} 1 0000000000000000 100 0 0 10 0\n",
                1000 + i
            ));
        }
        t.push_str("   8: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 5123 1 0000000000000000 20 4 30 10 -1\n");
        t.push_str("   9: 0100007F:1F90 0100007F:D2F2 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000\n");
        t
    }

    /// The /proc of a process of `uid` (removed on drop) whose namespace's tables list
    /// `tcp` and `tcp6` listeners (port, owner), PID 2 being `pid2`: its name, and whether its
    /// namespace is the process's own.
    fn process(
        name: &str,
        uid: u32,
        pid2: Option<(&str, bool)>,
        tcp: &[(u16, u32)],
        tcp6: &[(u16, u32)],
    ) -> Tree {
        let status = format!("Name:\twsload\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
        let (tcp, tcp6) = (table(tcp), table(tcp6));
        let mut files = vec![
            ("self/ns/net", ""),
            ("self/status", status.as_str()),
            ("net/tcp", tcp.as_str()),
            ("net/tcp6", tcp6.as_str()),
        ];
        let comm = pid2.map(|(comm, _)| format!("{comm}\n"));
        if let Some(comm) = &comm {
            files.push(("2/comm", comm));
        }
        if pid2.is_some_and(|(_, ours)| !ours) {
            files.push(("2/ns/net", ""));
        }
        let tree = Tree::new(&format!("ns-{name}"), &files);
        if pid2.is_some_and(|(_, ours)| ours) {
            tree.link("2/ns/net", "self/ns/net")
        } else {
            tree
        }
    }

    /// Whether the tree's process shares its namespace with others.
    fn shared(tree: &Tree) -> bool {
        let proc = tree.proc();
        proc.machine_wide(&proc.netns().expect("self/ns/net names it"))
    }

    #[test]
    fn the_hosts_namespace_holds_the_kernel_threads() {
        // Root on the host: kthreadd's namespace is ours; only root's listeners.
        let kthreadd_here = Some(("kthreadd", true));
        assert!(shared(&process("host", 0, kthreadd_here, &[(22, 0)], &[])));
        // A namespace of its own (`ip netns exec`, a container sharing the host's PIDs):
        // kthreadd is elsewhere.
        let kthreadd_apart = Some(("kthreadd", false));
        assert!(!shared(&process(
            "apart",
            0,
            kthreadd_apart,
            &[(9090, 0)],
            &[]
        )));
        // A pod's PID namespace: PID 2 is one of its own processes, in its namespace.
        let own_child = Some(("wsload", true));
        let pod = process("pod", 0, own_child, &[(9090, 0), (9091, 0)], &[]);
        assert!(!shared(&pod));
    }

    #[test]
    fn another_users_listener_shares_the_namespace() {
        // Not root: kthreadd's namespace cannot be read, and sshd (root) listens beside us.
        assert!(shared(&process(
            "user",
            1000,
            None,
            &[(9090, 1000), (22, 0)],
            &[]
        )));
        // A pod of one user: its listeners are its own; the established and time-wait
        // sockets after them (another uid, no owner) are never read as listeners.
        assert!(!shared(&process("alone", 1000, None, &[(9090, 1000)], &[])));
        // A sidecar proxy of another uid in the pod, on IPv6.
        let sidecar = process("sidecar", 1000, None, &[(9090, 1000)], &[(15001, 1337)]);
        assert!(shared(&sidecar));
        // Nothing readable: nothing says it is shared.
        let bare = Tree::new("ns-bare", &[("self/ns/net", "")]);
        assert!(!shared(&bare));
    }
}
