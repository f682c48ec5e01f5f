//! The local end of the libvirt tunnel: a unix socket in a private directory whose every
//! connection is pumped through its own `direct-streamlocal@openssh.com` channel.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::rpc_count::{FrameCounter, Procedure, RpcTally};
use super::{Mode, SshError, SshSession};

/// Longest path a unix socket address can hold on Linux (`sun_path` is 108 bytes incl. NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A running tunnel. Dropping it (or [`Tunnel::close`]) stops the listener, aborts the pumps and
/// removes the socket and its directory. The SSH session stays open while other clones exist.
#[derive(Debug)]
pub struct Tunnel {
    session: SshSession,
    dir: PathBuf,
    socket: PathBuf,
    mode: Mode,
    stop: CancellationToken,
    accept_task: JoinHandle<()>,
    rpc: Arc<RpcTally>,
}

impl Tunnel {
    pub(super) async fn open(session: SshSession, remote: &str, parent: Option<&Path>) -> Result<Self, SshError> {
        let parent = parent.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
        let dir = parent.join(format!("caplv-ssh-{}", uuid::Uuid::new_v4().simple()));
        let socket = dir.join("libvirt.sock");
        let socket_str = socket.to_str().unwrap_or_default();
        if socket_str.is_empty() || socket_str.len() > MAX_SOCKET_PATH || socket_str.contains(['?', '&', '#', '%', ' '])
        {
            return Err(SshError::TunnelFailed(format!(
                "local socket path {} is too long or has characters unusable in a libvirt URI",
                socket.display()
            )));
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| SshError::TunnelFailed(format!("creating {}: {e}", dir.display())))?;
        let listener = match UnixListener::bind(&socket) {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(SshError::TunnelFailed(format!("binding {}: {e}", socket.display())));
            }
        };
        // Belt and braces: the directory is already 0700.
        let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));

        let stop = CancellationToken::new();
        let rpc = Arc::new(RpcTally::default());
        let accept_task = tokio::spawn(accept_loop(
            listener,
            session.clone(),
            remote.to_string(),
            stop.clone(),
            socket.clone(),
            rpc.clone(),
        ));
        let mode = session.target().mode;
        Ok(Tunnel {
            session,
            dir,
            socket,
            mode,
            stop,
            accept_task,
            rpc,
        })
    }

    /// libvirt RPC messages sent to the host through this tunnel so far (calls and stream
    /// packets; each call is one round trip over SSH).
    pub fn rpc_messages(&self) -> u64 {
        self.rpc.total()
    }

    /// Those messages by program and procedure number, for a profile of where they go.
    pub fn rpc_procedures(&self) -> std::collections::BTreeMap<Procedure, u64> {
        self.rpc.by_procedure()
    }

    /// Path of the local socket.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// URI for `virt::connect::Connect::open`: `qemu+unix:///system?socket=<path>` (or `/session`).
    pub fn libvirt_uri(&self) -> String {
        format!("qemu+unix:///{}?socket={}", self.mode.as_str(), self.socket.display())
    }

    /// The SSH session the tunnel rides on.
    pub fn session(&self) -> &SshSession {
        &self.session
    }

    /// True when the tunnel can no longer carry traffic: closed, listener stopped, or the SSH
    /// connection is gone. The caller should then build a new session and tunnel.
    pub fn is_closed(&self) -> bool {
        self.stop.is_cancelled() || self.accept_task.is_finished() || self.session.is_closed()
    }

    /// Stop the tunnel and remove its files. Does not disconnect the SSH session.
    pub async fn close(self) {
        self.stop.cancel();
        // Drop does the rest.
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.stop.cancel();
        self.accept_task.abort();
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

async fn accept_loop(
    listener: UnixListener,
    session: SshSession,
    remote: String,
    stop: CancellationToken,
    socket: PathBuf,
    rpc: Arc<RpcTally>,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((conn, _)) => {
                    tokio::spawn(pump(conn, session.clone(), remote.clone(), stop.child_token(), rpc.clone()));
                }
                Err(e) => {
                    tracing::warn!(socket = %socket.display(), error = %e, "libvirt tunnel: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
        }
        if session.is_closed() {
            tracing::info!(target = %session.target(), "libvirt tunnel: SSH connection closed");
            break;
        }
    }
    // Pumps watch child tokens of `stop`, so they end too.
    stop.cancel();
}

async fn pump(conn: UnixStream, session: SshSession, remote: String, stop: CancellationToken, rpc: Arc<RpcTally>) {
    let channel = match session.open_streamlocal(&remote).await {
        Ok(c) => c,
        Err(e) => {
            // Dropping `conn` gives the libvirt client an EOF, which it reports as a failure.
            tracing::warn!(error = %e, "libvirt tunnel: cannot open channel");
            return;
        }
    };
    let (mut local_read, mut local_write) = conn.into_split();
    let (mut remote_read, mut remote_write) = tokio::io::split(channel);
    let upstream = async {
        let mut counter = FrameCounter::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = local_read.read(&mut buf).await?;
            if n == 0 {
                return remote_write.shutdown().await;
            }
            counter.feed(&buf[..n], &rpc);
            remote_write.write_all(&buf[..n]).await?;
        }
    };
    let downstream = async {
        tokio::io::copy(&mut remote_read, &mut local_write).await?;
        // Pass the host's EOF on, so the libvirt client sees the connection end.
        local_write.shutdown().await
    };
    tokio::select! {
        () = stop.cancelled() => {}
        r = async { tokio::try_join!(upstream, downstream) } => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "libvirt tunnel: connection ended with error");
            }
        }
    }
}
