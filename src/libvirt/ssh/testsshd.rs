//! Tests of the SSH transport against a real OpenSSH `sshd` on 127.0.0.1.
//!
//! The harness installs nothing: it needs `/usr/sbin/sshd` and `ssh-keygen` (Debian package
//! `openssh-server`, installed by the project's setup script). Each test starts its own sshd with
//! its own host key, config, port and authorized_keys in a temp dir, and kills it on drop.

use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::*;

const SSHD: &str = "/usr/sbin/sshd";
const TEST_DEADLINE: Duration = Duration::from_secs(60);

fn keygen(args: &[&str]) {
    let out = Command::new("ssh-keygen").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ssh-keygen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn new_key(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let p = path.to_str().unwrap();
    let mut args = vec!["-q", "-N", "", "-C", name, "-f", p];
    args.extend_from_slice(extra);
    keygen(&args);
    path
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct TestSshd {
    dir: tempfile::TempDir,
    child: Child,
    port: u16,
    host_pub: PathBuf,
    client_key: PathBuf,
    log: PathBuf,
}

impl TestSshd {
    /// Start sshd with the given client public keys authorized.
    fn start(authorized: &[&str]) -> Self {
        assert!(
            Path::new(SSHD).exists(),
            "{SSHD} is missing: install openssh-server (see the setup script)"
        );
        std::fs::create_dir_all("/run/sshd").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let host_key = new_key(d, "hostkey", &["-t", "ed25519"]);
        let client_key = new_key(d, "client", &["-t", "ed25519"]);
        let mut auth = std::fs::read_to_string(d.join("client.pub")).unwrap();
        for extra in authorized {
            auth.push_str(&std::fs::read_to_string(format!("{extra}.pub")).unwrap());
        }
        std::fs::write(d.join("authorized_keys"), auth).unwrap();
        let log = d.join("sshd.log");
        for _attempt in 0..5 {
            let port = free_port();
            let config = format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile {dir}/pid\n\
                 AuthorizedKeysFile {dir}/authorized_keys\nPermitRootLogin prohibit-password\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n\
                 AllowStreamLocalForwarding yes\nLogLevel DEBUG1\n",
                hk = host_key.display(),
                dir = d.display(),
            );
            std::fs::write(d.join("sshd_config"), config).unwrap();
            let stderr = std::fs::File::create(&log).unwrap();
            let mut child = Command::new(SSHD)
                .args(["-D", "-e", "-f"])
                .arg(d.join("sshd_config"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap();
            if wait_listening(&mut child, port) {
                return TestSshd {
                    host_pub: d.join("hostkey.pub"),
                    client_key,
                    log,
                    port,
                    child,
                    dir,
                };
            }
            // Port race or startup failure: try another port.
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "sshd did not start; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    fn log_text(&self) -> String {
        let mut s = String::new();
        let _ = std::fs::File::open(&self.log).and_then(|mut f| f.read_to_string(&mut s));
        s
    }

    /// Wait (bounded) until the log contains one of `needles` after the point where a russh
    /// client introduced itself (the readiness probe's own connection is thus ignored).
    /// Returns the log from that point on.
    async fn wait_log(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.log_text();
            let tail = text
                .find("software version russh")
                .map(|i| text[i..].to_string())
                .unwrap_or_default();
            if needles.iter().any(|n| tail.contains(n)) || Instant::now() > deadline {
                return tail;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn host_fingerprint_by_ssh_keygen(&self) -> String {
        let out = Command::new("ssh-keygen")
            .arg("-lf")
            .arg(&self.host_pub)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string()
    }

    fn target(&self) -> SshTarget {
        SshTarget {
            user: "root".into(),
            host: "127.0.0.1".into(),
            port: self.port,
            mode: Mode::System,
        }
    }

    fn options(&self, policy: HostKeyPolicy, key: &Path) -> SshOptions {
        let key = ClientKey::from_secret_bytes(&std::fs::read(key).unwrap()).unwrap();
        let mut o = SshOptions::new(self.target(), policy, key);
        o.connect_timeout = Duration::from_secs(15);
        o
    }

    fn pinned(&self) -> HostKeyPolicy {
        HostKeyPolicy::from_spec(Some(&self.host_fingerprint_by_ssh_keygen()), false).unwrap()
    }
}

/// Poll the port until sshd accepts, with a deadline; false if sshd exited or never listened.
fn wait_listening(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

impl Drop for TestSshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A unix-socket echo server standing in for libvirtd's socket.
fn echo_server(path: &Path) -> tokio::task::JoinHandle<()> {
    let listener = UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = conn.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    })
}

async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(TEST_DEADLINE, f)
        .await
        .expect("test exceeded its deadline");
}

const CLOSED: [&str; 3] = ["Connection closed by", "Disconnected from", "Connection reset by"];

fn assert_no_auth_attempt(log: &str) {
    assert!(
        CLOSED.iter().any(|c| log.contains(c)),
        "sshd never saw the client leave; log:\n{log}"
    );
    assert!(
        !log.contains("userauth-request"),
        "an authentication attempt reached sshd:\n{log}"
    );
    assert!(!log.contains("Accepted publickey"), "{log}");
}

#[tokio::test]
async fn fingerprint_matches_ssh_keygen() {
    let sshd = TestSshd::start(&[]);
    let key = russh::keys::load_public_key(&sshd.host_pub).unwrap();
    assert_eq!(fingerprint(&key), sshd.host_fingerprint_by_ssh_keygen());
}

#[tokio::test]
async fn pinned_connects_and_tunnels_two_concurrent_connections() {
    bounded(async {
        let sshd = TestSshd::start(&[]);
        let echo_path = sshd.dir.path().join("libvirt-sock");
        let _echo = echo_server(&echo_path);

        let session = SshSession::connect(&sshd.options(sshd.pinned(), &sshd.client_key))
            .await
            .unwrap();
        assert_eq!(session.host_fingerprint(), sshd.host_fingerprint_by_ssh_keygen());
        assert!(!session.is_closed());

        let tunnel = session
            .open_tunnel(echo_path.to_str().unwrap(), Some(sshd.dir.path()))
            .await
            .unwrap();
        let sock = tunnel.socket_path().to_path_buf();
        let dir = sock.parent().unwrap().to_path_buf();
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(
            tunnel.libvirt_uri(),
            format!("qemu+unix:///system?socket={}", sock.display())
        );
        assert!(!tunnel.is_closed());

        let roundtrip = |tag: u8| {
            let sock = sock.clone();
            async move {
                let payload: Vec<u8> = (0..300_000u32).map(|i| (i as u8) ^ tag).collect();
                let mut conn = UnixStream::connect(&sock).await.unwrap();
                let (mut r, mut w) = conn.split();
                let send = async {
                    w.write_all(&payload).await.unwrap();
                    w.shutdown().await.unwrap();
                };
                let mut got = Vec::new();
                let recv = async {
                    r.read_to_end(&mut got).await.unwrap();
                };
                tokio::join!(send, recv);
                assert_eq!(got.len(), payload.len());
                assert!(got == payload, "echo mismatch on connection {tag}");
            }
        };
        tokio::join!(roundtrip(1), roundtrip(2));

        let log = sshd.wait_log(&["Accepted publickey"]).await;
        assert!(log.contains("Accepted publickey for root"), "{log}");
        // Positive control for `assert_no_auth_attempt`: this is how an attempt shows in the log.
        assert!(log.contains("userauth-request"), "{log}");

        drop(tunnel);
        assert!(!sock.exists() && !dir.exists(), "tunnel files left behind");
        session.disconnect().await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !session.is_closed() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(session.is_closed());
    })
    .await;
}

#[tokio::test]
async fn rsa_pem_key_authenticates() {
    bounded(async {
        let keys = tempfile::tempdir().unwrap();
        let rsa = new_key(keys.path(), "rsa", &["-t", "rsa", "-b", "2048", "-m", "PEM"]);
        assert!(
            std::fs::read_to_string(&rsa)
                .unwrap()
                .starts_with("-----BEGIN RSA PRIVATE KEY-----")
        );
        let sshd = TestSshd::start(&[rsa.to_str().unwrap()]);
        let session = SshSession::connect(&sshd.options(sshd.pinned(), &rsa)).await.unwrap();
        assert!(!session.is_closed());
    })
    .await;
}

#[tokio::test]
async fn wrong_pin_is_refused_before_authentication() {
    bounded(async {
        let sshd = TestSshd::start(&[]);
        let other = tempfile::tempdir().unwrap();
        let other_pub = new_key(other.path(), "other", &["-t", "ed25519"]).with_extension("pub");
        let wrong = fingerprint(&russh::keys::load_public_key(other_pub).unwrap());
        let policy = HostKeyPolicy::from_spec(Some(&wrong), false).unwrap();

        let err = SshSession::connect(&sshd.options(policy, &sshd.client_key))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), SshErrorReason::HostKeyMismatch);
        let real = sshd.host_fingerprint_by_ssh_keygen();
        assert_eq!(err.observed_fingerprint(), Some(real.as_str()));
        assert!(
            err.to_string().contains(&real) && err.to_string().contains(&wrong),
            "{err}"
        );

        let log = sshd.wait_log(&CLOSED).await;
        assert_no_auth_attempt(&log);
    })
    .await;
}

#[tokio::test]
async fn no_pin_is_refused_and_opt_out_connects() {
    bounded(async {
        let sshd = TestSshd::start(&[]);
        let err = SshSession::connect(&sshd.options(HostKeyPolicy::NotPinned, &sshd.client_key))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), SshErrorReason::HostKeyNotPinned);
        let real = sshd.host_fingerprint_by_ssh_keygen();
        assert_eq!(err.observed_fingerprint(), Some(real.as_str()));
        assert!(err.to_string().contains(&real), "{err}");
        let log = sshd.wait_log(&CLOSED).await;
        assert_no_auth_attempt(&log);

        let policy = HostKeyPolicy::from_spec(None, true).unwrap();
        let session = SshSession::connect(&sshd.options(policy, &sshd.client_key))
            .await
            .unwrap();
        assert_eq!(session.host_fingerprint(), real);
    })
    .await;
}

#[tokio::test]
async fn wrong_client_key_fails_authentication_without_leaking_it() {
    bounded(async {
        let sshd = TestSshd::start(&[]);
        let keys = tempfile::tempdir().unwrap();
        let stranger = new_key(keys.path(), "stranger", &["-t", "ed25519"]);
        let err = SshSession::connect(&sshd.options(sshd.pinned(), &stranger))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), SshErrorReason::AuthenticationFailed);
        assert_eq!(err.observed_fingerprint(), None);
        let shown = format!("{err} {err:?}");
        let private = std::fs::read_to_string(&stranger).unwrap();
        for line in private.lines().filter(|l| !l.starts_with("-----")) {
            for chunk in line.as_bytes().chunks(12) {
                let chunk = std::str::from_utf8(chunk).unwrap();
                if chunk.len() == 12 {
                    assert!(!shown.contains(chunk), "error text contains key material: {shown}");
                }
            }
        }
        assert!(shown.contains("root"), "{shown}");
    })
    .await;
}

#[test]
fn unparsable_keys_get_clear_errors_without_material() {
    let keys = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(new_key(keys.path(), "k", &["-t", "ed25519"])).unwrap();
    let truncated: String =
        good.lines().take(3).map(|l| format!("{l}\n")).collect::<String>() + "-----END OPENSSH PRIVATE KEY-----\n";
    for (input, want) in [
        (b"not a key".to_vec(), "no PEM or OpenSSH"),
        (vec![0xff, 0xfe], "not UTF-8"),
        (truncated.clone().into_bytes(), "not a valid OpenSSH or PEM private key"),
        (
            b"-----BEGIN OPENSSH PRIVATE KEY-----\n!!!!\n-----END OPENSSH PRIVATE KEY-----\n".to_vec(),
            "not a valid",
        ),
    ] {
        let err = ClientKey::from_secret_bytes(&input).unwrap_err();
        assert_eq!(err.reason(), SshErrorReason::InvalidPrivateKey);
        let text = err.to_string();
        assert!(text.contains(want), "{text}");
        assert!(!text.contains(truncated.lines().nth(1).unwrap_or("-")), "{text}");
    }
    // Other accepted encodings, including CRLF line endings.
    let ecdsa = std::fs::read_to_string(new_key(keys.path(), "ec", &["-t", "ecdsa", "-m", "PKCS8"])).unwrap();
    assert!(ecdsa.starts_with("-----BEGIN PRIVATE KEY-----"));
    ClientKey::from_secret_bytes(ecdsa.as_bytes()).unwrap();
    let key = ClientKey::from_secret_bytes(good.replace('\n', "\r\n").as_bytes()).unwrap();
    let debug = format!("{key:?}");
    assert!(debug.starts_with("ClientKey(") && debug.contains("SHA256:"), "{debug}");
    let enc = new_key(keys.path(), "enc", &["-t", "ed25519"]);
    keygen(&["-q", "-p", "-P", "", "-N", "secret", "-f", enc.to_str().unwrap()]);
    let err = ClientKey::from_secret_bytes(&std::fs::read(&enc).unwrap()).unwrap_err();
    assert!(err.to_string().contains("passphrase"), "{err}");
}

#[tokio::test]
async fn closed_port_is_connection_failed() {
    bounded(async {
        let port = free_port();
        let keys = tempfile::tempdir().unwrap();
        let key = ClientKey::from_secret_bytes(&std::fs::read(new_key(keys.path(), "k", &["-t", "ed25519"])).unwrap())
            .unwrap();
        let target = SshTarget {
            user: "root".into(),
            host: "127.0.0.1".into(),
            port,
            mode: Mode::System,
        };
        let mut opts = SshOptions::new(target, HostKeyPolicy::InsecureAcceptAny, key);
        opts.connect_timeout = Duration::from_secs(5);
        let err = SshSession::connect(&opts).await.unwrap_err();
        assert_eq!(err.reason(), SshErrorReason::ConnectionFailed, "{err}");
        assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
    })
    .await;
}

#[test]
fn remote_socket_paths() {
    assert_eq!(remote_socket_path(Mode::System, None).unwrap(), SYSTEM_SOCKET);
    assert_eq!(
        remote_socket_path(Mode::Session, Some("/run/user/1000/libvirt/libvirt-sock")).unwrap(),
        "/run/user/1000/libvirt/libvirt-sock"
    );
    assert_eq!(
        remote_socket_path(Mode::Session, None).unwrap_err().reason(),
        SshErrorReason::TunnelFailed
    );
    assert!(remote_socket_path(Mode::System, Some("relative/sock")).is_err());
    assert!(remote_socket_path(Mode::System, Some("/a/../b")).is_err());
    assert_eq!(SshErrorReason::HostKeyMismatch.to_string(), "HostKeyMismatch");
}

/// Kill sshd's per-connection processes (children of the listener we started), dropping every
/// established connection as a network failure would.
fn kill_sshd_sessions(sshd: &TestSshd) {
    let pid = sshd.child.id();
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    assert!(!children.trim().is_empty(), "no sshd session process found");
    for child in children.split_whitespace() {
        let _ = Command::new("kill").args(["-9", child]).status();
    }
}

#[tokio::test]
async fn dead_connection_is_reported_and_missing_remote_socket_gives_eof() {
    bounded(async {
        let sshd = TestSshd::start(&[]);
        let session = SshSession::connect(&sshd.options(sshd.pinned(), &sshd.client_key))
            .await
            .unwrap();
        let missing = sshd.dir.path().join("no-such-sock");
        let tunnel = session.open_tunnel(missing.to_str().unwrap(), None).await.unwrap();

        // The remote end refuses the channel: the local client just sees EOF, the tunnel lives on.
        let mut conn = UnixStream::connect(tunnel.socket_path()).await.unwrap();
        let mut buf = Vec::new();
        let n = conn.read_to_end(&mut buf).await.unwrap_or(0);
        assert_eq!(n, 0);
        assert!(!tunnel.is_closed());

        kill_sshd_sessions(&sshd);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tunnel.is_closed() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(session.is_closed() && tunnel.is_closed(), "dead connection not noticed");

        // A fresh session (what the controller does on is_closed) works again.
        let again = SshSession::connect_with_backoff(&sshd.options(sshd.pinned(), &sshd.client_key), 3, Duration::ZERO)
            .await
            .unwrap();
        assert!(!again.is_closed());
    })
    .await;
}

#[tokio::test]
async fn backoff_retries_connection_failures_only() {
    bounded(async {
        let sshd = TestSshd::start(&[]);
        // Host key refusals are not retried: one attempt, then the error.
        let started = Instant::now();
        let err = SshSession::connect_with_backoff(
            &sshd.options(HostKeyPolicy::NotPinned, &sshd.client_key),
            5,
            Duration::from_secs(2),
        )
        .await
        .unwrap_err();
        assert_eq!(err.reason(), SshErrorReason::HostKeyNotPinned);
        assert!(started.elapsed() < Duration::from_secs(2), "refusal was retried");

        // Connection failures are retried with growing delays: 3 attempts => 50 + 100 ms of sleep.
        let mut opts = sshd.options(sshd.pinned(), &sshd.client_key);
        opts.target.port = free_port();
        let started = Instant::now();
        let err = SshSession::connect_with_backoff(&opts, 3, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(err.reason(), SshErrorReason::ConnectionFailed);
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "{:?}",
            started.elapsed()
        );
    })
    .await;
}
