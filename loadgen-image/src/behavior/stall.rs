//! Writes that wait for a server that does not read: a connection whose writes make no
//! progress for `spec.writeTimeout` ends as `server_not_reading`, with what its socket still
//! held as the evidence.
//!
//! Watched only while a write waits (the socket's buffer is full), so a write that goes
//! through at once costs nothing; the timer is allocated the first time one waits.

use crate::connect::Ws;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use wsload_ws::Io;

/// One connection's write watch: empty until a write first waits; with a cutoff, the
/// instant past which a write may not wait at all (a timed cell's deadline and its grace).
#[derive(Default)]
pub struct Stall {
    watch: Option<Box<Watch>>,
    cutoff: Option<Instant>,
}

struct Watch {
    timer: Pin<Box<Sleep>>,
    /// `Ws::write_progress` when progress was last seen, and when.
    mark: u32,
    since: Instant,
}

/// Why a write's wait ended.
pub enum Stalled {
    /// Nothing written for the limit while nothing waited unread.
    NoProgress,
    /// Still waiting at the cutoff: a server that never reads, flooding us meanwhile, keeps
    /// something unread, so `NoProgress` alone would never come.
    Cutoff,
}

impl Stall {
    /// A watch whose write may not wait past `cutoff`, if any.
    pub fn until(cutoff: Option<Instant>) -> Stall {
        Stall {
            watch: None,
            cutoff,
        }
    }

    /// Called when a write step of `ws` is pending: `Ready` once nothing has been written for
    /// `limit` while nothing sent to us waited unread (a server blocked writing to a client
    /// that does not read, as in a blast against an echo server, is not the server's fault),
    /// or at the cutoff.
    pub fn poll_stalled(
        &mut self,
        ws: &mut Ws,
        limit: Duration,
        cx: &mut Context<'_>,
    ) -> Poll<Stalled> {
        let written = ws.write_progress();
        let cutoff = self.cutoff;
        let wake = |due: Instant| cutoff.map_or(due, |c| due.min(c));
        let w = self.watch.get_or_insert_with(|| {
            let now = Instant::now();
            Box::new(Watch {
                timer: Box::pin(tokio::time::sleep_until(wake(now + limit))),
                mark: written,
                since: now,
            })
        });
        if written != w.mark {
            w.mark = written;
            w.since = Instant::now();
        }
        loop {
            ready!(w.timer.as_mut().poll(cx));
            let now = Instant::now();
            if cutoff.is_some_and(|c| now >= c) {
                return Poll::Ready(Stalled::Cutoff);
            }
            let due = w.since + limit;
            if now < due {
                w.timer.as_mut().reset(wake(due));
                continue;
            }
            if ws.has_unread(cx) {
                w.since = now;
                w.timer.as_mut().reset(wake(now + limit));
                continue;
            }
            return Poll::Ready(Stalled::NoProgress);
        }
    }
}

impl Stall {
    /// How long the write has waited with nothing written, once it has waited at all.
    pub fn idle(&self) -> Option<Duration> {
        self.watch.as_ref().map(|w| w.since.elapsed())
    }
}

/// What a stalled connection's evidence says: how long nothing was written, what wsload
/// still had queued, and what the kernel still held unacknowledged in its send queue.
pub fn evidence(ws: &Ws, limit: Duration) -> String {
    format!("no write progress for {limit:?}: {}", queues(ws))
}

/// The evidence of a write still waiting at the cell's deadline.
pub fn evidence_at_cutoff(ws: &Ws) -> String {
    format!(
        "a write still waiting at the cell's deadline: {}",
        queues(ws)
    )
}

/// The evidence of a counting loop's write still waiting at the deadline, the cell ended on
/// time: what was queued, and how long nothing had been written.
pub fn evidence_waiting(ws: &Ws, idle: Option<Duration>) -> String {
    let idle = idle.map_or_else(String::new, |d| {
        format!("; nothing written for {:.1} s", d.as_secs_f64())
    });
    format!(
        "a write still waiting at the cell's deadline: {}{idle}",
        queues(ws)
    )
}

/// What wsload still had queued, and what the kernel held unacknowledged.
fn queues(ws: &Ws) -> String {
    let tcp = match ws.get_ref() {
        Io::Plain(s) => s,
        Io::Tls(s) => s.get_ref().0,
    };
    let unacked = tcp
        .local_addr()
        .ok()
        .zip(tcp.peer_addr().ok())
        .and_then(|(l, p)| send_queue(l, p));
    let kernel = unacked.map_or_else(String::new, |n| {
        format!(", {n} bytes unacknowledged in the socket's send queue")
    });
    format!("{} bytes waiting to be written{kernel}", ws.queued())
}

/// The send queue (bytes not yet acknowledged by the peer) of the TCP socket `local` →
/// `peer`, from `/proc/net/tcp` or `/proc/net/tcp6` (Linux); `None` where it cannot be read.
/// A whole table read: only for the first stalled connection of a worker.
pub fn send_queue(local: SocketAddr, peer: SocketAddr) -> Option<u64> {
    let table = match local {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let text = std::fs::read_to_string(table).ok()?;
    let (l, p) = (proc_addr(local), proc_addr(peer));
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl, local_address, rem_address, st, tx_queue:rx_queue
        (f.len() > 4 && f[1].eq_ignore_ascii_case(&l) && f[2].eq_ignore_ascii_case(&p))
            .then(|| f[4].split_once(':'))
            .flatten()
            .and_then(|(tx, _)| u64::from_str_radix(tx, 16).ok())
    })
}

/// An address as `/proc/net/tcp*` writes it: the address's 32-bit words each in the host's
/// byte order, in hex, then the port.
fn proc_addr(a: SocketAddr) -> String {
    let words: Vec<u32> = match a {
        SocketAddr::V4(v4) => vec![u32::from_ne_bytes(v4.ip().octets())],
        SocketAddr::V6(v6) => v6
            .ip()
            .octets()
            .chunks(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    let mut s: String = words.iter().map(|w| format!("{w:08X}")).collect();
    s.push_str(&format!(":{:04X}", a.port()));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_the_kernel_writes_them() {
        if cfg!(target_endian = "little") {
            assert_eq!(
                proc_addr("127.0.0.1:8080".parse().expect("addr")),
                "0100007F:1F90"
            );
            assert_eq!(
                proc_addr("[::1]:443".parse().expect("addr")),
                "00000000000000000000000001000000:01BB"
            );
        }
    }

    /// Bytes the peer never reads stay in our send queue, and the table says how many.
    #[tokio::test]
    async fn the_send_queue_of_a_socket_is_read() {
        use tokio::io::AsyncWriteExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let (c, s) = tokio::join!(
            tokio::net::TcpStream::connect(l.local_addr().expect("addr")),
            l.accept()
        );
        let mut c = c.expect("connect");
        let _server = s.expect("accept");
        let (local, peer) = (c.local_addr().expect("local"), c.peer_addr().expect("peer"));
        assert_eq!(send_queue(local, peer), Some(0));
        // Far more than the peer's receive buffer takes: some stays unacknowledged.
        let chunk = vec![0u8; 1 << 20];
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            loop {
                c.write_all(&chunk).await.expect("write");
            }
        })
        .await;
        assert!(send_queue(local, peer).is_some_and(|n| n > 0));
    }
}
