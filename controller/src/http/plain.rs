//! The metrics and probe port (plain HTTP, every pod may reach it): bounded like the webhook's.
//! At most [`bounds::MAX_CONNECTIONS`] connections, and [`MAX_CONNECTIONS_PER_PEER`] from one
//! address, so that one pod cannot take the places the kubelet's probes and the scraper need;
//! headers within [`bounds::HEADER_TIMEOUT`] (an idle connection is closed after it too), in a
//! read buffer of [`bounds::MAX_READ_BUFFER`]; and no connection lives past
//! [`MAX_CONNECTION_AGE`], so requests kept coming on it cannot hold a place for ever. Plain
//! `axum::serve` had none of these: 1,400 connections sending unfinished headers added 548 MiB
//! in 5 s and none was cut (issue #42).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::bounds;

/// Connections open at once from one address. A probe or a scrape needs one or two.
pub const MAX_CONNECTIONS_PER_PEER: usize = 64;

/// Longest a connection is served: then it is closed once its current request is answered.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(30);

/// Time a connection being closed for its age gets to finish the request it is on.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The open connections, in all and per peer address.
#[derive(Debug, Clone)]
pub struct Places {
    all: Arc<Semaphore>,
    per_peer: Arc<Mutex<HashMap<IpAddr, usize>>>,
    peer_cap: usize,
}

/// One connection's place, given back when dropped.
#[derive(Debug)]
pub struct ConnectionPlace {
    _all: OwnedSemaphorePermit,
    peer: IpAddr,
    per_peer: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Places {
    /// `total` places, at most `per_peer` for one address.
    pub fn new(total: usize, per_peer: usize) -> Places {
        Places {
            all: Arc::new(Semaphore::new(total)),
            per_peer: Arc::default(),
            peer_cap: per_peer,
        }
    }

    /// A place for a connection from `peer`, or None when the server or that peer is full.
    pub fn take(&self, peer: IpAddr) -> Option<ConnectionPlace> {
        let all = self.all.clone().try_acquire_owned().ok()?;
        let mut counts = self.per_peer.lock().expect("not poisoned");
        let n = counts.entry(peer).or_insert(0);
        if *n >= self.peer_cap {
            return None;
        }
        *n += 1;
        Some(ConnectionPlace {
            _all: all,
            peer,
            per_peer: self.per_peer.clone(),
        })
    }
}

impl Drop for ConnectionPlace {
    fn drop(&mut self) {
        let mut counts = self.per_peer.lock().expect("not poisoned");
        if let Some(n) = counts.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.peer);
            }
        }
    }
}

/// Serves `router` over plain HTTP/1.1 on `listener` under the bounds above, until the process
/// stops. A failed `accept` (too many open files) is waited out, not fatal.
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> std::io::Result<()> {
    let places = Places::new(bounds::MAX_CONNECTIONS, MAX_CONNECTIONS_PER_PEER);
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("metrics port: accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(place) = places.take(peer.ip()) else {
            tracing::debug!("metrics port: no place for a connection from {peer}, closed");
            continue;
        };
        let router = router.clone();
        tokio::spawn(async move {
            serve_connection(sock, router).await;
            drop(place);
        });
    }
}

/// One connection: HTTP/1.1 with the header timer and buffer bound, closed at its age limit.
async fn serve_connection(sock: tokio::net::TcpStream, router: Router) {
    let service = hyper_util::service::TowerToHyperService::new(router);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(bounds::HEADER_TIMEOUT)
        .max_buf_size(bounds::MAX_READ_BUFFER)
        .serve_connection(hyper_util::rt::TokioIo::new(sock), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = tokio::time::sleep(MAX_CONNECTION_AGE) => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_cannot_take_every_place_and_places_come_back() {
        let places = Places::new(3, 2);
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let a1 = places.take(a).unwrap();
        let _a2 = places.take(a).unwrap();
        assert!(places.take(a).is_none(), "a third from one peer");
        let _b1 = places.take(b).unwrap();
        assert!(places.take(b).is_none(), "the server is full");
        drop(a1);
        let _b2 = places.take(b).expect("a place given back is taken again");
        drop(places.take(a));
        assert!(places.take(b).is_none(), "b at its cap");
        assert!(places.per_peer.lock().unwrap()[&a] == 1);
    }
}
