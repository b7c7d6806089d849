//! `pods/exec`: the API server proxies a client's WebSocket (`v5.channel.k8s.io` or
//! `v4.channel.k8s.io`) to `/exec/{namespace}/{pod}/{container}`. The command runs like the pod's
//! own process: the pod's environment, in a private mount namespace with the pod's volumes bound at
//! their mount paths (the launcher [`super::super::runner`] wrote). Frames carry a channel byte (0
//! stdin, 1 stdout, 2 stderr, 3 the final `Status`, 255 close a stream in v5), as a real kubelet's
//! do.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use futures::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper::HeaderMap;
use hyper_util::rt::TokioIo;
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use super::super::KubeletConfig;
use super::PodContainer;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const CLOSE: u8 = 255;

/// The sub-protocols served, most preferred first (v5 adds closing stdin).
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// What an exec request asks for, from its path and query.
#[derive(Debug, PartialEq)]
struct ExecRequest {
    namespace: String,
    pod: String,
    container: String,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

impl ExecRequest {
    fn parse(path: &str, query: &str) -> Result<Self> {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let ["exec", namespace, pod, container] = parts[..] else {
            bail!("unsupported streaming path {path}");
        };
        let mut req = ExecRequest {
            namespace: namespace.into(),
            pod: pod.into(),
            container: container.into(),
            command: vec![],
            stdin: false,
            stdout: false,
            stderr: false,
        };
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            let on = matches!(v.as_ref(), "1" | "true");
            match k.as_ref() {
                "command" => req.command.push(v.into_owned()),
                "input" | "stdin" => req.stdin = on,
                "output" | "stdout" => req.stdout = on,
                "error" | "stderr" => req.stderr = on,
                "tty" if on => bail!("tty is not supported by the testenv kubelet"),
                _ => {}
            }
        }
        if req.command.is_empty() {
            bail!("no command given");
        }
        Ok(req)
    }
}

/// The first of our protocols the client offered.
fn pick_protocol(offered: &str) -> Option<&'static str> {
    let offered: Vec<&str> = offered.split(',').map(str::trim).collect();
    PROTOCOLS.into_iter().find(|p| offered.contains(p))
}

/// The first of our protocols a request offers in `Sec-WebSocket-Protocol`.
pub(super) fn protocol_of(headers: &HeaderMap) -> Option<&'static str> {
    let offered: Vec<&str> = headers
        .get_all("Sec-WebSocket-Protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    pick_protocol(&offered.join(","))
}

/// Serves one exec over an upgraded connection, ending with the `Status` frame and a normal close.
pub(super) async fn serve(
    ws: Socket,
    client: Client,
    cfg: KubeletConfig,
    path: &str,
    query: &str,
) -> Result<()> {
    let (mut sink, mut incoming) = ws.split();
    let result = match ExecRequest::parse(path, query) {
        Ok(req) => run(&client, &cfg, &req, &mut sink, &mut incoming).await,
        Err(e) => Err(e),
    };
    let status = match result {
        Ok(0) => json!({"metadata": {}, "status": "Success"}),
        Ok(code) => json!({
            "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        Err(e) => json!({
            "metadata": {}, "status": "Failure", "reason": "InternalError",
            "message": format!("{e:#}"),
        }),
    };
    let mut frame = vec![STATUS];
    frame.extend(serde_json::to_vec(&status)?);
    sink.send(Message::binary(frame)).await?;
    // A normal closure (1000): client-go treats a close without a code as an error.
    let close = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    sink.send(Message::Close(Some(close))).await.ok();
    Ok(())
}

/// The WebSocket an exec runs over.
pub(super) type Socket = tokio_tungstenite::WebSocketStream<TokioIo<Upgraded>>;
type Sink = futures::stream::SplitSink<Socket, Message>;
type Incoming = futures::stream::SplitStream<Socket>;

/// Runs the command in the pod's view, relaying its streams; returns its exit code.
async fn run(
    client: &Client,
    cfg: &KubeletConfig,
    req: &ExecRequest,
    sink: &mut Sink,
    incoming: &mut Incoming,
) -> Result<i32> {
    let (launcher, env) = pod_view(client, cfg, req).await?;
    let mut cmd = tokio::process::Command::new(crate::kubelet::tools::host_binary("unshare")?);
    cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh"])
        .arg(&launcher)
        .args(&req.command)
        .env_clear()
        .envs(&env)
        .stdin(if req.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    crate::procs::own_group_and_die_with_parent(&mut cmd);
    let mut child = cmd.spawn().context("starting the command")?;

    // Both streams are always read (a stream the client did not ask for is dropped), so the
    // command never blocks on a full pipe.
    let (tx, mut frames) = mpsc::channel::<Vec<u8>>(16);
    if let Some(s) = child.stdout.take() {
        tokio::spawn(relay(s, STDOUT, tx.clone()));
    }
    if let Some(s) = child.stderr.take() {
        tokio::spawn(relay(s, STDERR, tx.clone()));
    }
    drop(tx);
    let (want_out, want_err) = (req.stdout, req.stderr);
    let mut stdin = child.stdin.take();
    loop {
        tokio::select! {
            frame = frames.recv() => match frame {
                Some(f) if (f[0] == STDOUT && want_out) || (f[0] == STDERR && want_err) => {
                    sink.send(Message::binary(f)).await?
                }
                Some(_) => {}
                None => break,
            },
            msg = incoming.next() => match msg {
                Some(Ok(Message::Binary(b))) => match (b.first(), b.get(1)) {
                    (Some(&STDIN), _) => {
                        if let Some(w) = stdin.as_mut() {
                            w.write_all(&b[1..]).await.ok();
                        }
                    }
                    (Some(&CLOSE), Some(&STDIN)) => stdin = None,
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    bail!("the client went away before the command ended")
                }
                Some(Ok(_)) => {}
            },
        }
    }
    drop(stdin);
    let status = child.wait().await?;
    Ok(status.code().unwrap_or(137))
}

/// Sends what `stream` yields as frames on `channel`, until it ends.
async fn relay(mut stream: impl AsyncRead + Unpin, channel: u8, tx: mpsc::Sender<Vec<u8>>) {
    let mut buf = vec![0u8; 32 * 1024];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut frame = Vec::with_capacity(n + 1);
        frame.push(channel);
        frame.extend_from_slice(&buf[..n]);
        if tx.send(frame).await.is_err() {
            break;
        }
    }
}

/// The launcher and environment of the pod's running container, or why it cannot take a command.
async fn pod_view(
    client: &Client,
    cfg: &KubeletConfig,
    req: &ExecRequest,
) -> Result<(PathBuf, BTreeMap<String, String>)> {
    let target = PodContainer::find(client, cfg, &req.namespace, &req.pod, &req.container).await?;
    let launcher = target.dir.join("launcher.sh");
    if !target.running || !launcher.is_file() {
        bail!("{target} is not running a process");
    }
    let env = serde_json::from_slice(&std::fs::read(target.dir.join("env.json"))?)
        .context("reading the pod's environment")?;
    Ok((launcher, env))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_request_is_read_from_the_path_and_repeated_command_parameters() {
        let req = ExecRequest::parse(
            "/exec/db/mysql-0/mysql",
            "command=sh&command=-c&command=echo+%27a+b%27&output=1&error=1",
        )
        .unwrap();
        assert_eq!(
            req,
            ExecRequest {
                namespace: "db".into(),
                pod: "mysql-0".into(),
                container: "mysql".into(),
                command: vec!["sh".into(), "-c".into(), "echo 'a b'".into()],
                stdin: false,
                stdout: true,
                stderr: true,
            }
        );
    }

    #[test]
    fn other_paths_tty_and_empty_commands_are_refused() {
        assert!(ExecRequest::parse("/attach/ns/p/c", "command=ls").is_err());
        assert!(ExecRequest::parse("/exec/ns/p/c", "command=ls&tty=1").is_err());
        assert!(ExecRequest::parse("/exec/ns/p/c", "output=1").is_err());
    }

    #[test]
    fn v5_is_preferred_and_unknown_protocols_are_refused() {
        assert_eq!(
            pick_protocol("v4.channel.k8s.io, v5.channel.k8s.io"),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(
            pick_protocol("v4.channel.k8s.io"),
            Some("v4.channel.k8s.io")
        );
        assert_eq!(pick_protocol("channel.k8s.io,base64.channel.k8s.io"), None);
    }
}
