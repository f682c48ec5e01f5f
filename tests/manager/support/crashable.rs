//! A manager that a test can kill the way SIGKILL kills a process: it runs on a tokio runtime
//! of its own, with a client made on that runtime, and dropping the runtime ends every task it
//! started at whatever it was awaiting. Nothing is flushed, no Lease is released, every cache
//! and every in-flight request is gone; the next manager starts from what the API server holds.

use std::sync::{Mutex, PoisonError};

use caplv::{
    app::{self, Shared, leader::LeaderConfig},
    clock::OffsetClock,
    reconcile::Settings,
};
use tokio_util::sync::CancellationToken;

use super::{MANAGER_USER, manager_config, wait_until};

/// One manager's runtime and what stops it gracefully.
struct Running {
    runtime: tokio::runtime::Runtime,
    shared: Shared,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The manager of a test, killed and restarted at will.
pub struct Crashable {
    server: memkube::Server,
    settings: Settings,
    clock: OffsetClock,
    leader: Option<LeaderConfig>,
    running: Mutex<Option<Running>>,
    /// How many times it was killed.
    kills: Mutex<u32>,
}

impl Crashable {
    /// Start a manager against `server`, with leader election when `leader` is given, and wait
    /// until it is ready.
    pub async fn start(
        server: &memkube::Server,
        settings: Settings,
        clock: OffsetClock,
        leader: Option<LeaderConfig>,
    ) -> Self {
        let manager = Self {
            server: server.clone(),
            settings,
            clock,
            leader,
            running: Mutex::new(None),
            kills: Mutex::new(0),
        };
        manager.launch().await;
        manager
    }

    async fn launch(&self) {
        self.replace().await;
    }

    /// Start a new manager in place of the running one, which is killed first, if there is
    /// one; done under the lock, so that nobody ever finds no manager between the two. Then
    /// wait until the new one is ready.
    async fn replace(&self) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = {
            let _on_its_runtime = runtime.enter();
            self.server.client_as(MANAGER_USER)
        };
        let shared = Shared::new().unwrap();
        let shutdown = CancellationToken::new();
        let mut config = manager_config(self.settings.clone(), &self.clock);
        config.leader = self.leader.clone();
        {
            let mut running = self.running();
            if let Some(old) = running.take() {
                old.runtime.shutdown_background();
                *self.kills.lock().unwrap_or_else(PoisonError::into_inner) += 1;
            }
            let task = runtime.spawn(app::run(client, config, shared.clone(), shutdown.clone()));
            *running = Some(Running {
                runtime,
                shared: shared.clone(),
                shutdown,
                task,
            });
        }
        wait_until("the manager ready", || {
            let ready = shared.readiness.clone();
            async move { ready.is_ready() }
        })
        .await;
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Kill the manager at once, then start a new one and wait until it is ready.
    pub async fn crash_and_restart(&self) {
        self.replace().await;
    }

    /// The running manager's shared state (its host connections among them: a test-driver
    /// host's domains are seen only through the connection that made them).
    pub fn shared(&self) -> Option<Shared> {
        self.running().as_ref().map(|r| r.shared.clone())
    }

    /// Whether the manager runs (it was not killed) and runs the controllers.
    pub fn leads(&self) -> bool {
        self.running()
            .as_ref()
            .is_some_and(|r| r.shared.metrics.leader.get() == 1)
    }

    /// Kill the manager, for good.
    pub fn kill(&self) {
        if let Some(running) = self.running().take() {
            running.runtime.shutdown_background();
        }
        *self.kills.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    }

    /// How many times the manager was killed.
    pub fn kills(&self) -> u32 {
        *self.kills.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stop the manager gracefully; it must exit cleanly.
    pub async fn stop(&self) {
        let Some(running) = self.running().take() else {
            return;
        };
        running.shutdown.cancel();
        running.task.await.unwrap().unwrap();
        running.runtime.shutdown_background();
    }
}

impl Drop for Crashable {
    /// A manager still running when the test ends (it failed) is killed without blocking.
    fn drop(&mut self) {
        self.kill();
    }
}
