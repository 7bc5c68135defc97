//! A TCP proxy that delays what it forwards ([`serve`]): each connection accepted on a listening
//! address is joined to a target, and every chunk read in either direction is written to the
//! other side `delay` after it was read, in order. A round trip through it takes at least twice
//! `delay` more than without it (tokio's timer rounds each wait up to the next millisecond).
//! The cluster's measurements put one in front of each node, so that every hop to a node is
//! slower than loopback (this machine's kernel has no `netem`).

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        tcp::{OwnedReadHalf, OwnedWriteHalf},
        TcpListener, TcpStream,
    },
    sync::mpsc,
    time::Instant,
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
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
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
}
