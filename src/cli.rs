//! Command-line interface. Every flag can also be set through the environment variable named
//! in its help, so the same binary is configured by Helm values or by hand.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::controllers::Family;

/// caplv-manager: Cluster API infrastructure (libvirt), Ignition bootstrap and scheduled
/// machines, in one process.
#[derive(Debug, Parser)]
#[command(name = "caplv-manager", version, about, long_about = None, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// Logging options, valid for every subcommand.
    #[command(flatten)]
    pub log: LogArgs,
    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options of `run`, accepted without the word `run`.
    #[command(flatten)]
    pub run: RunArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controllers against the cluster from the kubeconfig or the in-cluster config (default).
    Run(RunArgs),
    /// Print every CRD this binary defines as multi-document YAML, or write one file per CRD.
    Crds(CrdsArgs),
    /// Print the RBAC rules each controller family needs (the Helm chart's source), or write
    /// one file per family with `--out-dir`.
    Rbac(RbacArgs),
    /// Start an in-memory API server with every CRD, a Cluster API simulator and the
    /// controllers; write a kubeconfig once ready; run until SIGINT/SIGTERM.
    #[cfg(feature = "sandbox")]
    #[command(mut_arg("metrics_addr", |a| a.default_value("127.0.0.1:8080")))]
    Sandbox(SandboxArgs),
    /// Answer "when will my worker run?": evaluate a schedule and print
    /// `{"active":…,"nextTransition":…}` (UTC); exit 2 on an invalid schedule.
    Schedule(ScheduleArgs),
    /// Ignition tools.
    #[command(subcommand)]
    Ignition(IgnitionCommand),
}

/// `ignition` subcommands.
#[derive(Debug, Subcommand)]
pub enum IgnitionCommand {
    /// Print the Ignition JSON a VM would receive: the bootstrap config with the machine's
    /// hostname, provider ID and static network keyfile merged in.
    Render(IgnitionRenderArgs),
}

/// Options of `ignition render`.
#[derive(Debug, Args)]
pub struct IgnitionRenderArgs {
    /// The bootstrap Ignition JSON (e.g. the worker-ignition Secret's `value`, decoded).
    #[arg(long, value_name = "FILE")]
    pub bootstrap: PathBuf,
    /// A LibvirtMachine manifest (YAML).
    #[arg(long, value_name = "LIBVIRTMACHINE.yaml")]
    pub machine: PathBuf,
    /// Provider ID to inject instead of the derived `libvirt:///<uid>`.
    #[arg(long, value_name = "ID")]
    pub provider_id: Option<String>,
}

/// How logs are written.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, env = "CAPLV_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log filter in `tracing` env-filter syntax, e.g. `info,caplv=debug`.
    #[arg(long, env = "CAPLV_LOG", default_value = "info", global = true)]
    pub log_filter: String,
}

/// Log line formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Options of `run`.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Controller families to run, comma-separated: caplv, ignition, fivespot.
    /// Defaults to every family compiled into this binary.
    #[arg(long, env = "CAPLV_CONTROLLERS", value_delimiter = ',', value_parser = parse_family)]
    pub controllers: Vec<Family>,
    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, env = "CAPLV_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Only watch objects in this namespace (default: all namespaces).
    #[arg(long, env = "CAPLV_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Hold a coordination.k8s.io Lease and run controllers only while holding it.
    #[arg(long, env = "CAPLV_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "CAPLV_LEADER_ELECTION_NAME", default_value = "caplv-manager")]
    pub leader_election_name: String,
    /// Namespace of the leader-election Lease (default: the client's namespace, in a pod its own).
    #[arg(long, env = "CAPLV_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Identity written into the Lease (default: the host name plus a random suffix).
    #[arg(long, env = "CAPLV_LEADER_ELECTION_IDENTITY")]
    pub leader_election_identity: Option<String>,
    /// Seconds a Lease stays valid without renewal.
    #[arg(long, env = "CAPLV_LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=3600))]
    pub lease_duration_seconds: u64,
    /// Seconds between checks that a LibvirtCluster's control plane endpoint answers.
    #[arg(long, env = "CAPLV_ENDPOINT_PROBE_INTERVAL_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub endpoint_probe_interval_seconds: u64,
    /// Seconds a control plane endpoint TCP probe may take.
    #[arg(long, env = "CAPLV_ENDPOINT_PROBE_TIMEOUT_SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub endpoint_probe_timeout_seconds: u64,
    /// ScheduledMachines creating their objects at the same time; when more windows open at
    /// once, higher `priority` goes first. The API server's priority and fairness protects it,
    /// so this bounds the burst rather than throttling it.
    #[arg(long, env = "CAPLV_MAX_CONCURRENT_CREATIONS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub max_concurrent_creations: u64,
    /// Seconds between checks that a provisioned LibvirtMachine's domain still runs (a shut-off
    /// domain is restarted, a vanished one reported).
    #[arg(long, env = "CAPLV_DOMAIN_CHECK_INTERVAL_SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub domain_check_interval_seconds: u64,
    /// libvirt hosts the manager may be connecting to (SSH handshake plus libvirt open) at the
    /// same time; open connections are not limited.
    #[arg(long, env = "CAPLV_MAX_CONCURRENT_HOST_CONNECTS", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub max_concurrent_host_connects: u64,
    /// Minutes after a LibvirtMachine is provisioned during which its kubelet's bootstrap client
    /// CSR is approved (renewals and serving CSRs of a linked Node are approved at any time).
    #[arg(long, env = "CAPLV_CSR_APPROVAL_WINDOW_MINUTES", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=10080))]
    pub csr_approval_window_minutes: u64,
    /// ServiceAccount whose bound tokens go into the `<cluster>-kubeconfig` Secrets that
    /// SelfManagedControlPlanes maintain (what Cluster API core reaches the cluster with).
    #[arg(long, env = "CAPLV_WORKLOAD_SERVICE_ACCOUNT", default_value = crate::reconcile::DEFAULT_WORKLOAD_SERVICE_ACCOUNT)]
    pub workload_service_account: String,
    /// Namespace of that ServiceAccount (default: the client's namespace, in a pod its own).
    #[arg(long, env = "CAPLV_WORKLOAD_SERVICE_ACCOUNT_NAMESPACE")]
    pub workload_service_account_namespace: Option<String>,
    /// The API server URL the `<cluster>-kubeconfig` Secrets name when a SelfManagedControlPlane
    /// has no `spec.server`, e.g. `https://kubernetes.default.svc` when Cluster API core runs in
    /// this cluster (default: each Cluster's `controlPlaneEndpoint`).
    #[arg(long, env = "CAPLV_WORKLOAD_API_SERVER", value_parser = parse_https_url)]
    pub workload_api_server: Option<String>,
    /// Minutes a minted workload token is valid; a new one is minted when a third remains.
    #[arg(long, env = "CAPLV_WORKLOAD_TOKEN_LIFETIME_MINUTES", default_value_t = 1440, value_parser = clap::value_parser!(u64).range(10..=525_600))]
    pub workload_token_lifetime_minutes: u64,
    /// Seconds to wait for the Kubernetes API server at start-up before giving up.
    #[arg(long, env = "CAPLV_API_TIMEOUT_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub api_timeout_seconds: u64,
}

impl RunArgs {
    /// The control plane probe interval.
    #[must_use]
    pub fn endpoint_probe_interval(&self) -> Duration {
        Duration::from_secs(self.endpoint_probe_interval_seconds)
    }

    /// The control plane probe timeout.
    #[must_use]
    pub fn endpoint_probe_timeout(&self) -> Duration {
        Duration::from_secs(self.endpoint_probe_timeout_seconds)
    }
}

/// Options of `crds`.
#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Write one `<name>.yaml` per CRD into this directory instead of printing to stdout.
    #[arg(long, env = "CAPLV_CRDS_OUT_DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Options of `rbac`.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// Write one `<family>.yaml` rule file per family (plus common and leader-election) here.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

/// Options of `schedule`: the same fields as a ScheduledMachine's `spec.schedule`.
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// A `daysOfWeek` element, e.g. `mon-fri` or `sat,sun`; repeat for several.
    #[arg(long = "days", value_name = "ELEM")]
    pub days: Vec<String>,
    /// An `hoursOfDay` element, e.g. `9-17` or `22-6`; repeat for several.
    #[arg(long = "hours", value_name = "ELEM")]
    pub hours: Vec<String>,
    /// A 5-field cron expression for window starts (with --duration, instead of days and hours).
    #[arg(long, value_name = "EXPR", requires = "duration")]
    pub cron: Option<String>,
    /// How long each cron window lasts, e.g. `8h`, `90m`, `1h30m`.
    #[arg(long, value_name = "D", requires = "cron")]
    pub duration: Option<String>,
    /// IANA time zone the schedule is read in.
    #[arg(long, default_value = "UTC")]
    pub timezone: String,
    /// An exclusion (the machine is off): a date `2026-12-25`, or `START/END` with each an RFC
    /// 3339 instant or a date; repeat for several.
    #[arg(long = "exclude", value_name = "PERIOD")]
    pub exclude: Vec<String>,
    /// An inclusion (the machine is on), in the same form as --exclude; repeat for several.
    #[arg(long = "include", value_name = "PERIOD")]
    pub include: Vec<String>,
    /// `spec.schedule.leadTime`: also say when provisioning starts, e.g. `10m` (`auto` has no
    /// history here, so it is zero).
    #[arg(long = "lead-time", value_name = "D")]
    pub lead_time: Option<String>,
    /// Evaluate at this instant (RFC 3339) instead of now.
    #[arg(long, value_name = "RFC3339")]
    pub at: Option<chrono::DateTime<chrono::FixedOffset>>,
    /// Print a week view instead of JSON: DAYS local days (7 unless given) from the day of --at.
    #[arg(long, value_name = "DAYS", num_args = 0..=1, default_missing_value = "7",
          value_parser = clap::value_parser!(u32).range(1..=62))]
    pub calendar: Option<u32>,
    /// Read the schedule from a ScheduledMachine manifest instead of the flags (--exclude and
    /// --include still add to it).
    #[arg(short = 'f', long = "file", value_name = "SM.yaml", conflicts_with_all = ["days", "hours", "cron", "duration", "timezone"])]
    pub file: Option<PathBuf>,
}

#[cfg(feature = "sandbox")]
/// Options of `sandbox`.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// Address the in-memory API server listens on (port 0 picks a free one).
    #[arg(long, env = "CAPLV_SANDBOX_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Where to write the kubeconfig, once everything is ready.
    #[arg(long, env = "CAPLV_SANDBOX_KUBECONFIG", default_value = "caplv-sandbox.kubeconfig")]
    pub kubeconfig_out: PathBuf,
    /// `test`: every LibvirtHost is served by a private libvirt test driver and no address in a
    /// manifest is ever dialled. `real`: hosts and endpoints are contacted as written.
    #[arg(long, env = "CAPLV_SANDBOX_LIBVIRT", value_enum, default_value_t = LibvirtMode::Test)]
    pub libvirt: LibvirtMode,
    /// With `--libvirt test`: where the simulated hosts' node files go (default: a temporary
    /// directory, removed on exit). A host's faked load goes beside its node file, in
    /// `<namespace>-<name>.xml.stats.json`, e.g. `{"availableMemoryMib": 1024}` to put it under
    /// memory pressure.
    #[arg(long, env = "CAPLV_SANDBOX_HOSTS_DIR")]
    pub hosts_dir: Option<PathBuf>,
    /// Cluster API core version the simulator serves.
    #[arg(long, env = "CAPLV_SANDBOX_CAPI_VERSION", value_enum, default_value_t = CapiVersionArg::V1beta1)]
    pub capi_version: CapiVersionArg,
    /// `memkube`: the in-memory API server and the Cluster API simulator, in this process.
    /// `real`: a genuine kube-apiserver, kube-controller-manager and Cluster API core, already
    /// running (`scripts/sandbox.sh --real` starts them), reached with the three kubeconfigs below.
    #[arg(long, env = "CAPLV_SANDBOX_CONTROL_PLANE", value_enum, default_value_t = ControlPlaneMode::Memkube)]
    pub control_plane: ControlPlaneMode,
    /// With `--control-plane real`: an administrator's kubeconfig, which applies the seed.
    #[arg(
        long,
        env = "CAPLV_SANDBOX_ADMIN_KUBECONFIG",
        required_if_eq("control_plane", "real")
    )]
    pub admin_kubeconfig: Option<PathBuf>,
    /// With `--control-plane real`: the manager's kubeconfig (the chart's ServiceAccount).
    #[arg(
        long,
        env = "CAPLV_SANDBOX_MANAGER_KUBECONFIG",
        required_if_eq("control_plane", "real")
    )]
    pub manager_kubeconfig: Option<PathBuf>,
    /// With `--control-plane real`: the bootstrap identity the emulated kubelet files its first
    /// CSR with.
    #[arg(
        long,
        env = "CAPLV_SANDBOX_BOOTSTRAP_KUBECONFIG",
        required_if_eq("control_plane", "real")
    )]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// Run the seed's story once, narrated: apply the seed's manifests (the ScheduledMachine
    /// always on), watch the worker boot and join, close its window, watch it go; exit 0 on
    /// success or non-zero naming the step that failed.
    #[arg(long)]
    pub demo: bool,
    /// Seconds each demo step may take before the demo fails naming it.
    #[arg(long, env = "CAPLV_DEMO_STEP_TIMEOUT_SECONDS", default_value_t = 45, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub demo_step_timeout_seconds: u64,
    /// Manager options (the metrics address defaults to loopback here).
    #[command(flatten)]
    pub run: RunArgs,
}

#[cfg(feature = "sandbox")]
/// How the sandbox reaches libvirt hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LibvirtMode {
    /// Private in-process libvirt test drivers; nothing is dialled.
    Test,
    /// Real hosts, as the manifests name them.
    Real,
}

#[cfg(feature = "sandbox")]
/// Where the sandbox's API server and Cluster API core come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ControlPlaneMode {
    /// In-memory, in this process: seconds, no Go build.
    Memkube,
    /// Genuine components started outside the sandbox.
    Real,
}

#[cfg(feature = "sandbox")]
/// Cluster API core versions the sandbox can serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CapiVersionArg {
    /// CAPI up to v1.10 (OpenShift up to 4.20).
    V1beta1,
    /// CAPI v1.11 and later.
    V1beta2,
}

/// An `https://host[:port]` URL, as a kubeconfig's `server`.
fn parse_https_url(s: &str) -> Result<String, String> {
    let uri: http::Uri = s.parse().map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("https") || uri.host().is_none_or(str::is_empty) {
        return Err(format!("{s:?} must be an https:// URL with a host"));
    }
    Ok(s.to_owned())
}

/// Parse one controller family name, failing with a message that names the choices and says
/// when a family exists but was left out of this build.
fn parse_family(s: &str) -> Result<Family, String> {
    let family = Family::from_name(s.trim()).ok_or_else(|| {
        format!(
            "unknown controller family {s:?}; expected one of: {}",
            Family::ALL.map(Family::as_str).join(", ")
        )
    })?;
    if family.is_compiled() {
        Ok(family)
    } else {
        Err(format!(
            "controller family {:?} is not compiled into this binary (it was built without the Cargo feature `{}`)",
            family.as_str(),
            family.as_str()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("caplv-manager").chain(args.iter().copied()))
    }

    #[test]
    fn run_is_the_default_subcommand() {
        let cli = parse(&["--metrics-addr", "127.0.0.1:9000", "--controllers", "caplv,ignition"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.run.metrics_addr, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(cli.run.controllers, [Family::Caplv, Family::Ignition]);
    }

    #[test]
    fn unknown_family_is_named_with_the_choices() {
        let err = parse(&["--controllers", "caplv,nope"]).unwrap_err().to_string();
        assert!(
            err.contains("\"nope\"") && err.contains("caplv, ignition, fivespot"),
            "{err}"
        );
    }

    #[test]
    fn out_of_range_values_are_refused() {
        assert!(parse(&["--lease-duration-seconds", "1"]).is_err());
        assert!(parse(&["--metrics-addr", "not-an-address"]).is_err());
    }

    #[test]
    fn help_mentions_every_env_var() {
        let help = parse(&["run", "--help"]).unwrap_err().to_string();
        for var in [
            "CAPLV_CONTROLLERS",
            "CAPLV_METRICS_ADDR",
            "CAPLV_LEADER_ELECT",
            "CAPLV_WATCH_NAMESPACE",
            "CAPLV_LOG_FORMAT",
            "CAPLV_WORKLOAD_SERVICE_ACCOUNT",
            "CAPLV_WORKLOAD_SERVICE_ACCOUNT_NAMESPACE",
            "CAPLV_WORKLOAD_TOKEN_LIFETIME_MINUTES",
        ] {
            assert!(help.contains(var), "{var} missing from help:\n{help}");
        }
    }
}
