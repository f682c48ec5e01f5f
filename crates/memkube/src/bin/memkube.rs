//! `memkube --listen 127.0.0.1:PORT --kubeconfig-out FILE`: run the in-memory API server.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// In-memory Kubernetes API server for tests.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write a kubeconfig for the server here once it is listening.
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = memkube::Server::new();
    let addr = server.serve(args.listen).await?;
    if let Some(path) = &args.kubeconfig_out {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, memkube::kubeconfig_yaml(addr))?;
        std::fs::rename(&tmp, path)?;
    }
    eprintln!("memkube listening on http://{addr}");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    server.shutdown();
    Ok(())
}
