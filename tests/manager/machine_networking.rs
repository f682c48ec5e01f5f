//! LibvirtMachine networking and data disks on private libvirt test-driver hosts: several
//! interfaces (a DHCP one with a reservation, a static bridge one), per-interface keyfiles and
//! MACs, addresses from the leases, and teardown of the reservation and the data disk.
//!
//! The test driver implements `virNetworkUpdate` (per connection, so the test reads the
//! manager's own connection) and answers `virDomainInterfaceAddresses` with made-up addresses in
//! 192.168.122.0/24.

use caplv::{api::common::MachineAddressType, ignition::keyfile};
use kube::{ResourceExt, api::DeleteParams};
use serde_json::{Value, json};

use crate::libvirt_machine::{capi_machines, fixture, hv, lvms, machine, wait_gone, wait_reason};

/// The keyfile for `iface` in a rendered Ignition config.
pub(crate) fn keyfile_in(ignition: &[u8], iface: &str) -> keyfile::Keyfile {
    let v: Value = serde_json::from_slice(ignition).unwrap();
    let path = format!("/etc/NetworkManager/system-connections/{iface}.nmconnection");
    let file = v["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path.as_str())
        .unwrap_or_else(|| panic!("no {path} in {v}"));
    let source = file["contents"]["source"].as_str().unwrap();
    let compression = file["contents"]["compression"].as_str();
    let text = caplv::ignition::dataurl::decode(source, compression).unwrap();
    keyfile::parse(&String::from_utf8(text).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nics_a_reservation_and_a_data_disk_come_and_go_with_the_machine() {
    let f = fixture(&["laptop"], 2).await;
    let env = &f.env;
    let edits = json!({"spec": {
        "network": null,
        "networks": [
            {"type": "network", "name": "default", "dhcp": true, "addresses": ["192.168.122.50/24"]},
            {"type": "bridge", "name": "br0", "interfaceName": "enp2s0", "addresses": ["10.0.0.5/24"]}
        ],
        "additionalDisks": [{"name": "data", "size": "2Gi", "bus": "scsi"}]
    }});
    machine(env, "net-01", "laptop", edits, Some("boot")).await;
    let ready = wait_reason(env, "net-01", "DomainRunning").await;
    assert_eq!(ready.status, "True");
    let lm = lvms(&env.client).get("net-01").await.unwrap();
    let status = lm.status.clone().unwrap();
    let artifacts = status.managed_artifacts.clone().unwrap();
    assert_eq!(artifacts.additional_volumes, ["default/net-01-data.qcow2"]);
    let [reservation] = &artifacts.dhcp_reservations[..] else {
        panic!("one reservation: {artifacts:?}");
    };
    assert_eq!(
        (reservation.network.as_str(), reservation.ip.as_str()),
        ("default", "192.168.122.50")
    );
    assert!(reservation.mac.starts_with("52:54:00:"));

    let host = hv(env, "laptop").await;
    let entries = host.dhcp_hosts("default").unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e.mac == reservation.mac && e.ip == "192.168.122.50"),
        "{entries:?}"
    );
    assert_eq!(
        host.volume("default", "net-01-data.qcow2").unwrap().unwrap().capacity,
        2 << 30
    );
    let ignition = host.download_volume("default", "net-01-ignition.ign", 1 << 20).unwrap();
    let first = keyfile_in(&ignition, "enp1s0");
    assert_eq!(first.get("ipv4", "method"), Some("auto"));
    assert_eq!(
        first.get("ethernet", "mac-address"),
        Some(reservation.mac.to_ascii_uppercase().as_str())
    );
    let second = keyfile_in(&ignition, "enp2s0");
    assert_eq!(second.get("ipv4", "address1"), Some("10.0.0.5/24"));
    assert_ne!(
        second.get("ethernet", "mac-address"),
        first.get("ethernet", "mac-address")
    );

    let ips: Vec<&str> = status
        .addresses
        .iter()
        .filter(|a| a.type_ == MachineAddressType::InternalIP)
        .map(|a| a.address.as_str())
        .collect();
    assert!(ips.contains(&"10.0.0.5"), "{ips:?}");
    assert!(
        ips.iter().any(|ip| ip.starts_with("192.168.122.")),
        "the DHCP NIC's address comes from libvirt: {ips:?}"
    );

    capi_machines(&env.client)
        .delete("net-01", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(env, "net-01").await;
    assert!(
        !host
            .dhcp_hosts("default")
            .unwrap()
            .iter()
            .any(|e| e.mac == reservation.mac),
        "the reservation is removed with the machine"
    );
    assert_eq!(host.volume("default", "net-01-data.qcow2").unwrap(), None);
    assert!(lm.uid().is_some_and(|u| reservation.mac.len() == 17 && !u.is_empty()));
}
