//! Host maintenance on real libvirt: a host put in maintenance has its spot VM's Machine
//! deleted and the domain torn down; the ScheduledMachine's next Machine waits while the
//! maintenance lasts, and boots on the host once it ends.

use super::{
    Genuine,
    kill_switch::{NS, manifests},
    var, virsh, wait,
};

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn maintenance_empties_a_real_host_and_its_end_brings_the_vm_back() {
    let env = Genuine::start().await;
    let always = r#"{daysOfWeek: [mon-sun], hoursOfDay: ["0-23"], timezone: UTC}"#;
    env.apply(&manifests(
        &var("CAPLV_CP_API_PORT"),
        "sys-maint",
        always,
        "192.168.122.53/24",
    ));
    let get = |args: &[&str]| {
        let mut all = vec!["-n", NS, "get"];
        all.extend_from_slice(args);
        env.get(&all)
    };
    let lvm = |path: &str| get(&["libvirtmachine", "sys-maint", "-o", &format!("jsonpath={path}")]);
    let maintenance = || {
        get(&[
            "libvirthost",
            "sys",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Maintenance\")].reason}",
        ])
    };
    wait("the VM running", || lvm("{.status.domainState}") == "running").await;
    let first_uid = lvm("{.metadata.uid}");

    env.patch(&["-n", NS, "libvirthost", "sys"], r#"{"spec":{"maintenance":true}}"#);
    wait("the host drained", || maintenance() == "Drained").await;
    wait("the domain gone from the host", || {
        !virsh(&["list", "--all", "--name"]).contains("sys-maint")
    })
    .await;
    // The window is still open: the next Machine's LibvirtMachine waits for the host.
    wait("the replacement waiting for the host", || {
        lvm("{.metadata.uid}") != first_uid
            && lvm("{.status.conditions[?(@.type==\"Ready\")].message}").contains("the host is in maintenance")
    })
    .await;

    env.patch(&["-n", NS, "libvirthost", "sys"], r#"{"spec":{"maintenance":false}}"#);
    wait("maintenance over", || maintenance() == "InService").await;
    wait("the VM back on the host", || lvm("{.status.domainState}") == "running").await;
    assert_eq!(virsh(&["domstate", "sys-maint"]).trim(), "running");

    env.patch(
        &["-n", NS, "scheduledmachine", "sys-maint"],
        r#"{"spec":{"killSwitch":true}}"#,
    );
    wait("the domain gone", || {
        !virsh(&["list", "--all", "--name"]).contains("sys-maint")
    })
    .await;
    env.stop().await;
}
