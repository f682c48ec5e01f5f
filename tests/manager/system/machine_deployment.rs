//! A MachineDeployment on real libvirt with genuine Cluster API core and the genuine in-cluster
//! IPAM provider: its LibvirtMachineTemplate chooses the host by `hostSelector` and takes each
//! replica's address from an `InClusterIPPool`. Scaled 2 → 0 → 1: every replica gets its own
//! address and domain, and scaling down leaves nothing on the host and no claim in the pool.

use super::{Genuine, host_and_cluster, var, virsh, wait};

const NS: &str = "sys-md";

fn manifests() -> String {
    deployment_manifests(&Deployment {
        ns: NS,
        cluster: "md",
        host_pool: "lab",
        addresses: "192.168.122.70-192.168.122.79",
        name: "workers",
        replicas: 2,
    })
}

/// A MachineDeployment on the host `hv` of a Cluster, with its templates and address pool.
pub(super) struct Deployment<'a> {
    /// The namespace of it all.
    pub ns: &'a str,
    /// The Cluster (and LibvirtCluster).
    pub cluster: &'a str,
    /// The `pool` label of the host, which the template selects.
    pub host_pool: &'a str,
    /// The `InClusterIPPool`'s range, e.g. `192.168.122.70-192.168.122.79`.
    pub addresses: &'a str,
    /// The MachineDeployment's name (its replicas' names begin with it).
    pub name: &'a str,
    /// Its replicas.
    pub replicas: u32,
}

/// The host and Cluster of [`host_and_cluster`], an `InClusterIPPool` `workers`, the
/// IgnitionConfigTemplate and LibvirtMachineTemplate `workers` and the MachineDeployment.
pub(super) fn deployment_manifests(d: &Deployment<'_>) -> String {
    let (pool, base) = (var("CAPLV_SYS_POOL"), var("CAPLV_SYS_BASE_IMAGE"));
    let Deployment {
        ns,
        cluster,
        host_pool,
        addresses,
        name,
        replicas,
    } = d;
    let base_objects = host_and_cluster(
        ns,
        "hv",
        &format!("{{pool: {host_pool}}}"),
        cluster,
        &var("CAPLV_CP_API_PORT"),
    );
    format!(
        r#"{base_objects}---
apiVersion: ipam.cluster.x-k8s.io/v1alpha2
kind: InClusterIPPool
metadata: {{name: workers, namespace: {ns}}}
spec: {{addresses: [{addresses}], prefix: 24, gateway: 192.168.122.1}}
---
apiVersion: v1
kind: Secret
metadata: {{name: worker-ignition, namespace: {ns}}}
stringData:
  value: '{{"ignition":{{"version":"3.4.0"}}}}'
---
apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1
kind: IgnitionConfigTemplate
metadata: {{name: workers, namespace: {ns}}}
spec:
  template:
    spec: {{secretRef: {{name: worker-ignition}}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: LibvirtMachineTemplate
metadata: {{name: workers, namespace: {ns}}}
spec:
  template:
    spec:
      hostSelector: {{matchLabels: {{pool: {host_pool}}}}}
      domain: {{firmware: uefi, vcpus: 1, memoryMB: 512, type: qemu}}
      rootDisk: {{baseImage: {base}, storagePool: {pool}, size: 128Mi}}
      shutdown: {{mode: Hard}}
      network:
        type: network
        name: default
        addressesFromPools:
          - {{apiGroup: ipam.cluster.x-k8s.io, kind: InClusterIPPool, name: workers}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  clusterName: {cluster}
  replicas: {replicas}
  selector: {{matchLabels: {{pool: workers}}}}
  template:
    metadata: {{labels: {{pool: workers}}}}
    spec:
      clusterName: {cluster}
      bootstrap:
        configRef: {{apiVersion: bootstrap.cluster.x-k8s.io/v1alpha1, kind: IgnitionConfigTemplate, name: workers}}
      infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: LibvirtMachineTemplate, name: workers}}
"#
    )
}

/// The running replicas: (LibvirtMachine name, its claimed address), sorted.
fn running(env: &Genuine) -> Vec<(String, String)> {
    let out = env.get(&[
        "-n",
        NS,
        "get",
        "libvirtmachine",
        "-o",
        r#"jsonpath={range .items[?(@.status.domainState=="running")]}{.metadata.name} {.status.claimedAddresses[0].address}{"\n"}{end}"#,
    ]);
    let mut replicas: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, a)| (n.to_owned(), a.to_owned()))
        .collect();
    replicas.sort();
    replicas
}

fn count(env: &Genuine, kind: &str) -> usize {
    env.get(&["-n", NS, "get", kind, "-o", "name"]).lines().count()
}

/// Nothing of the deployment's replicas is left on the host: no domain, no volume.
fn host_is_clean(names: &[String]) {
    let domains = virsh(&["list", "--all", "--name"]);
    let volumes = virsh(&["vol-list", &var("CAPLV_SYS_POOL")]);
    for name in names {
        assert!(
            !domains.lines().any(|d| d.trim() == name),
            "domain {name} left: {domains}"
        );
        assert!(!volumes.contains(name.as_str()), "volumes of {name} left: {volumes}");
    }
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn a_machine_deployment_scales_two_to_zero_to_one_with_an_address_per_replica() {
    let env = Genuine::start().await;
    env.apply(&manifests());

    wait("two replicas running", || running(&env).len() == 2).await;
    let two = running(&env);
    let addresses: Vec<&str> = two.iter().map(|(_, a)| a.as_str()).collect();
    assert_ne!(addresses[0], addresses[1], "every replica has its own address: {two:?}");
    for (name, address) in &two {
        assert!(
            address.starts_with("192.168.122.7") && address.ends_with("/24"),
            "{two:?}"
        );
        assert!(virsh(&["domstate", name]).contains("running"), "{name}");
        let host = env.get(&[
            "-n",
            NS,
            "get",
            "libvirtmachine",
            name,
            "-o",
            "jsonpath={.status.hostRef.name}",
        ]);
        assert_eq!(host, "hv", "the pool's one host was chosen");
    }
    assert_eq!(count(&env, "ipaddressclaims.ipam.cluster.x-k8s.io"), 2);

    env.scale(NS, "machinedeployment/workers", 0);
    wait("no replica left", || count(&env, "libvirtmachine") == 0).await;
    let names: Vec<String> = two.iter().map(|(n, _)| n.clone()).collect();
    host_is_clean(&names);
    wait("claims released", || {
        count(&env, "ipaddressclaims.ipam.cluster.x-k8s.io") == 0
    })
    .await;
    wait("addresses back in the pool", || {
        count(&env, "ipaddresses.ipam.cluster.x-k8s.io") == 0
    })
    .await;

    env.scale(NS, "machinedeployment/workers", 1);
    wait("one replica running", || running(&env).len() == 1).await;
    let one = running(&env);
    assert!(!names.contains(&one[0].0), "a new replica, not an old one: {one:?}");
    assert!(one[0].1.starts_with("192.168.122.7"), "{one:?}");

    let out = env.kubectl(&["-n", NS, "delete", "cluster", "md", "--wait=false"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait("the last replica gone", || count(&env, "libvirtmachine") == 0).await;
    host_is_clean(&[one[0].0.clone()]);
    // Core deletes the control plane before the Cluster goes; it must not come back meanwhile.
    wait("Cluster md gone", || count(&env, "clusters.cluster.x-k8s.io") == 0).await;
    assert_eq!(count(&env, "selfmanagedcontrolplanes"), 0);
    env.stop().await;
}
