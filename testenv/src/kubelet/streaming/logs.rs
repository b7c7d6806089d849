//! `pods/log`: `/containerLogs/{namespace}/{pod}/{container}` answers with what the container's
//! process wrote (stdout and stderr, interleaved as written), with `tailLines` and `limitBytes`
//! applied as a kubelet applies them; `follow` streams new output until the process ends. A pod
//! whose image is not mapped to a program has no process and an empty log.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::Client;
use tokio::sync::mpsc;

use super::super::KubeletConfig;
use super::{Body, PodContainer};

/// What a log request asks for.
#[derive(Debug, Default, PartialEq)]
struct LogRequest {
    follow: bool,
    tail_lines: Option<usize>,
    limit_bytes: Option<usize>,
}

impl LogRequest {
    fn parse(query: &str) -> Result<Self> {
        let mut req = LogRequest::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "follow" => req.follow = matches!(v.as_ref(), "1" | "true"),
                "tailLines" => req.tail_lines = Some(v.parse()?),
                "limitBytes" => req.limit_bytes = Some(v.parse()?),
                "previous" if v == "true" => bail!("the testenv kubelet keeps no previous logs"),
                _ => {}
            }
        }
        Ok(req)
    }

    /// The part of `log` asked for: the last `tailLines` lines, then at most `limitBytes`.
    fn select<'a>(&self, log: &'a [u8]) -> &'a [u8] {
        let mut start = 0;
        if let Some(n) = self.tail_lines {
            let body = log.strip_suffix(b"\n").unwrap_or(log);
            start = match n {
                0 => log.len(),
                n => body
                    .iter()
                    .enumerate()
                    .rev()
                    .filter(|(_, b)| **b == b'\n')
                    .nth(n - 1)
                    .map_or(0, |(i, _)| i + 1),
            };
        }
        let end = self
            .limit_bytes
            .map_or(log.len(), |l| (start + l).min(log.len()));
        &log[start..end]
    }
}

/// The response to a containerLogs request at `path`.
pub(super) async fn respond(
    client: &Client,
    cfg: &KubeletConfig,
    path: &str,
    query: &str,
) -> Result<Body> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["containerLogs", ns, pod, container] = parts[..] else {
        bail!("unsupported log path {path}");
    };
    let req = LogRequest::parse(query)?;
    let target = PodContainer::find(client, cfg, ns, pod, container).await?;
    let file = target.dir.join("log");
    let log = std::fs::read(&file).unwrap_or_default();
    let first = Bytes::copy_from_slice(req.select(&log));
    if !req.follow || !target.running {
        return Ok(Full::new(first).boxed());
    }
    let (tx, rx) = mpsc::channel(16);
    tx.send(first).await.ok();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    tokio::spawn(follow(file, log.len() as u64, pods, pod.to_string(), tx));
    let frames = futures::stream::unfold(rx, |mut rx| async {
        let chunk = rx.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(chunk)), rx))
    });
    Ok(StreamBody::new(frames).boxed())
}

/// Sends what is appended to `file` after `offset` until the pod stops running or the client
/// goes away.
async fn follow(
    file: PathBuf,
    mut offset: u64,
    pods: Api<Pod>,
    pod: String,
    tx: mpsc::Sender<Bytes>,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let running = matches!(pods.get_opt(&pod).await, Ok(Some(p))
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        let mut new = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&file) {
            if f.seek(SeekFrom::Start(offset)).is_ok() && f.read_to_end(&mut new).is_ok() {
                offset += new.len() as u64;
            }
        }
        if (!new.is_empty() && tx.send(Bytes::from(new)).await.is_err()) || !running {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_lines_and_limit_bytes_cut_like_a_kubelet() {
        let log = b"one\ntwo\nthree\n";
        let req = |q: &str| LogRequest::parse(q).unwrap();
        assert_eq!(req("").select(log), log);
        assert_eq!(req("tailLines=2").select(log), b"two\nthree\n");
        assert_eq!(req("tailLines=9").select(log), log);
        assert_eq!(req("tailLines=0").select(log), b"");
        assert_eq!(req("limitBytes=5").select(log), b"one\nt");
        assert_eq!(req("tailLines=1&limitBytes=3").select(log), b"thr");
        assert!(req("follow=true").follow);
        assert!(LogRequest::parse("previous=true").is_err());
    }
}
