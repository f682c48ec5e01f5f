//! Networking on real libvirt: a machine with two interfaces on the `default` network (one by
//! DHCP with a reservation, one static) and a data disk; the reservation is in dnsmasq's network
//! definition while the machine lives and gone with it, like the disk.

use super::{Genuine, kill_switch, var, virsh, wait};

const NAME: &str = "sys-net";
const RESERVED: &str = "192.168.122.60";

/// The kill-switch manifests with this test's interfaces and data disk in place of its one
/// static interface.
fn manifests(api_port: &str) -> String {
    let always = r#"{daysOfWeek: [mon-sun], hoursOfDay: ["0-23"], timezone: UTC}"#;
    let base = kill_switch::manifests(api_port, NAME, always, "192.168.122.61/24");
    let single = "      network:\n        type: network\n        name: default\n        addresses: [192.168.122.61/24]\n        gateway: 192.168.122.1\n";
    assert!(base.contains(single), "the kill-switch manifest changed shape");
    let several = format!(
        "      networks:\n        - {{type: network, name: default, dhcp: true, addresses: [{RESERVED}/24]}}\n        \
         - {{type: network, name: default, interfaceName: enp2s0, addresses: [192.168.122.61/24]}}\n      \
         additionalDisks:\n        - {{name: data, size: 64Mi}}\n"
    );
    base.replace(single, &several)
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn two_nics_a_dhcp_reservation_and_a_data_disk_live_and_die_with_the_machine() {
    let env = Genuine::start().await;
    env.apply(&manifests(&var("CAPLV_CP_API_PORT")));
    let get = |args: &[&str]| {
        let mut all = vec!["-n", kill_switch::NS, "get"];
        all.extend_from_slice(args);
        env.get(&all)
    };
    wait("LibvirtMachine sys-net running", || {
        get(&["libvirtmachine", NAME, "-o", "jsonpath={.status.domainState}"]) == "running"
    })
    .await;
    let mac = get(&[
        "libvirtmachine",
        NAME,
        "-o",
        "jsonpath={.status.managedArtifacts.dhcpReservations[0].mac}",
    ]);
    assert!(mac.starts_with("52:54:00:") && mac.len() == 17, "{mac:?}");

    let net = virsh(&["net-dumpxml", "default"]);
    let entry = net
        .lines()
        .find(|l| l.contains("<host ") && l.contains(&mac))
        .unwrap_or_else(|| panic!("no DHCP host for {mac} in\n{net}"));
    assert!(
        entry.contains(&format!("ip='{RESERVED}'")) && entry.contains(&format!("name='{NAME}'")),
        "{entry}"
    );
    let persistent = virsh(&["net-dumpxml", "default", "--inactive"]);
    assert!(
        persistent.contains(&mac),
        "the persistent definition has it too:\n{persistent}"
    );

    let xml = virsh(&["dumpxml", NAME]);
    assert_eq!(xml.matches("<interface type='network'>").count(), 2, "{xml}");
    assert!(xml.contains(&format!("<mac address='{mac}'/>")), "{xml}");
    assert!(
        xml.contains(&format!("volume='{NAME}-data.qcow2'")) && xml.contains("<target dev='vdb'"),
        "{xml}"
    );
    let volumes = virsh(&["vol-list", &var("CAPLV_SYS_POOL")]);
    assert!(volumes.contains(&format!("{NAME}-data.qcow2")), "{volumes}");

    env.patch(
        &["-n", kill_switch::NS, "scheduledmachine", NAME],
        r#"{"spec":{"killSwitch":true}}"#,
    );
    wait("libvirtmachine sys-net gone", || {
        let out = env.kubectl(&["-n", kill_switch::NS, "get", "libvirtmachine", "-o", "name"]);
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains(NAME)
    })
    .await;
    let net = virsh(&["net-dumpxml", "default"]);
    assert!(!net.contains(&mac), "reservation removed:\n{net}");
    assert!(!virsh(&["net-dumpxml", "default", "--inactive"]).contains(&mac));
    let volumes = virsh(&["vol-list", &var("CAPLV_SYS_POOL")]);
    assert!(!volumes.contains(NAME), "volumes gone: {volumes}");
    env.stop().await;
}
