//! A TCP proxy that delays what it forwards ([`serve`]): each connection accepted on a listening
//! address is joined to a target, and every chunk read in either direction is written to the
//! other side `delay` after it was read, in order. A round trip through it takes twice `delay`
//! more than without it, give or take the scheduler's slack: the waits are timed by a thread of
//! its own ([`Alarm`]), not by tokio's timer, which rounds each up to the next millisecond and
//! made a 1 ms delay about 2.2 ms.
//! The cluster's measurements put one in front of each node, so that every hop to a node is
//! slower than loopback (this machine's kernel has no `netem`).

use std::{
    cmp::Ordering,
    collections::BinaryHeap,
    net::SocketAddr,
    sync::{Arc, Condvar, Mutex, OnceLock},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        tcp::{OwnedReadHalf, OwnedWriteHalf},
        TcpListener, TcpStream,
    },
    sync::{mpsc, oneshot},
};

/// Bytes read at once.
const CHUNK: usize = 64 << 10;

/// Accepts connections on `listener` for ever, joining each to `target` through the delay.
pub async fn serve(listener: TcpListener, target: SocketAddr, delay: Duration) -> std::io::Result<()> {
    loop {
        let (client, _) = listener.accept().await?;
        tokio::spawn(async move {
            if let Ok(server) = TcpStream::connect(target).await {
                join(client, server, delay).await;
            }
        });
    }
}

/// Forwards both ways until either side closes.
async fn join(a: TcpStream, b: TcpStream, delay: Duration) {
    let _ = (a.set_nodelay(true), b.set_nodelay(true));
    let ((a_read, a_write), (b_read, b_write)) = (a.into_split(), b.into_split());
    tokio::join!(forward(a_read, b_write, delay), forward(b_read, a_write, delay));
}

/// Writes what `from` reads to `to`, each chunk `delay` after it was read.
async fn forward(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buf = vec![0; CHUNK];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            if chunks.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let writing = async move {
        while let Some((at, chunk)) = due.recv().await {
            if at > Instant::now() && alarm().at(at).await.is_err() {
                break;
            }
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}

/// The process's [`Alarm`], started at its first use.
fn alarm() -> &'static Alarm {
    static ALARM: OnceLock<Arc<Alarm>> = OnceLock::new();
    ALARM.get_or_init(|| {
        let alarm = Arc::new(Alarm::default());
        let runs = Arc::clone(&alarm);
        std::thread::Builder::new()
            .name("delay-alarm".into())
            .spawn(move || runs.run())
            .expect("a thread for the proxy's alarm");
        alarm
    })
}

/// Wakes waiting tasks at their instants: one thread sleeping until the earliest is due on a
/// condition variable (a futex with a precise timeout), then waking every one due.
#[derive(Default)]
struct Alarm {
    /// Who waits, earliest first.
    queue: Mutex<BinaryHeap<Due>>,
    earlier: Condvar,
}

/// One task's wait: woken at `at`.
struct Due {
    at: Instant,
    wake: oneshot::Sender<()>,
}

impl Ord for Due {
    /// Earliest first in a max-heap: the order reversed.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl Alarm {
    /// Answers at `at`.
    fn at(&self, at: Instant) -> oneshot::Receiver<()> {
        let (wake, woken) = oneshot::channel();
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let first = queue.peek().is_none_or(|d| at < d.at);
        queue.push(Due { at, wake });
        drop(queue);
        if first {
            self.earlier.notify_one();
        }
        woken
    }

    fn run(&self) {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let now = Instant::now();
            queue = match queue.peek().map(|d| d.at) {
                None => self.earlier.wait(queue).unwrap_or_else(|p| p.into_inner()),
                Some(at) if at <= now => {
                    if let Some(due) = queue.pop() {
                        let _ = due.wake.send(());
                    }
                    queue
                }
                Some(at) => self.earlier.wait_timeout(queue, at - now).unwrap_or_else(|p| p.into_inner()).0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server behind the proxy: what is sent comes back whole and in order, a round trip
    /// no sooner than twice the delay.
    #[tokio::test]
    async fn bytes_come_through_in_order_each_way_delayed() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = vec![0; 4096];
            while let Ok(n @ 1..) = s.read(&mut buf).await {
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = proxy.local_addr().unwrap();
        let delay = Duration::from_millis(20);
        tokio::spawn(serve(proxy, target, delay));
        let mut client = TcpStream::connect(at).await.unwrap();
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let started = Instant::now();
        let (mut read, mut write) = client.split();
        let (_, back) = tokio::join!(write.write_all(&sent), async {
            let mut back = vec![0; sent.len()];
            read.read_exact(&mut back).await.unwrap();
            back
        });
        assert!(started.elapsed() >= 2 * delay, "{:?}", started.elapsed());
        assert_eq!(back, sent);
    }

    #[tokio::test]
    async fn the_alarm_wakes_each_waiter_at_its_instant_not_behind_later_ones() {
        let alarm = alarm();
        let start = Instant::now();
        let offsets = [300, 0, 150, 0];
        let waits = offsets.map(|ms| {
            let at = start + Duration::from_millis(ms);
            let wait = alarm.at(at);
            async move {
                wait.await.unwrap();
                (Instant::now(), at)
            }
        });
        let woken = futures_join(waits.into()).await;
        for (when, at) in &woken {
            assert!(when >= at, "woken {:?} before its instant", *at - *when);
        }
        let latest = start + Duration::from_millis(300);
        for (ms, (when, _)) in offsets.iter().zip(&woken).filter(|(ms, _)| **ms < 300) {
            assert!(*when < latest, "the wait of {ms} ms was held until the latest instant");
        }
    }

    /// Awaits every future, each on a task of its own.
    async fn futures_join<T: Send + 'static>(
        futures: Vec<impl std::future::Future<Output = T> + Send + 'static>,
    ) -> Vec<T> {
        let tasks: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    }
}
