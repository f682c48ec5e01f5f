//! Reclaim on real libvirt: the test takes memory on the host side (this machine is the host:
//! libvirtd runs in a network namespace of the same kernel), the host's statistics, read over
//! the pinned SSH tunnel, fall below `minFreeMemoryMB`, and the manager removes the spot VM,
//! keeps it off for the cool-down, and brings it back once the memory is given back.

use std::time::Instant;

use super::{
    Genuine,
    kill_switch::{NS, manifests},
    var, virsh, wait,
};

/// Memory the host could hand out, MiB, as libvirt counts it: free, buffers and page cache.
fn host_available_mib() -> u64 {
    let stats = virsh(&["nodememstats"]);
    let kib = |field: &str| -> u64 {
        stats
            .lines()
            .find(|l| l.trim_start().starts_with(field))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in virsh nodememstats: {stats}"))
    };
    (kib("free") + kib("buffers") + kib("cached")) / 1024
}

/// Take `mib` of anonymous memory and touch every page, so it is resident.
fn hog(mib: u64) -> Vec<u8> {
    vec![0x5a; usize::try_from(mib).unwrap() * 1024 * 1024]
}

#[tokio::test]
#[ignore = "needs root, real libvirt and the genuine control plane: scripts/system-test.sh runs it"]
async fn memory_taken_on_the_host_reclaims_the_spot_vm_until_it_is_given_back() {
    let env = Genuine::start().await;
    let always = r#"{daysOfWeek: [mon-sun], hoursOfDay: ["0-23"], timezone: UTC}"#;
    env.apply(&manifests(
        &var("CAPLV_CP_API_PORT"),
        "sys-reclaim",
        always,
        "192.168.122.52/24",
    ));
    let get = |args: &[&str]| {
        let mut all = vec!["-n", NS, "get"];
        all.extend_from_slice(args);
        env.get(&all)
    };
    let sm = |path: &str| get(&["scheduledmachine", "sys-reclaim", "-o", &format!("jsonpath={path}")]);
    let host = |path: &str| get(&["libvirthost", "sys", "-o", &format!("jsonpath={path}")]);
    let pressure = || host("{.status.conditions[?(@.type==\"UnderPressure\")].reason}");
    let domain_running =
        || get(&["libvirtmachine", "sys-reclaim", "-o", "jsonpath={.status.domainState}"]) == "running";
    wait("the spot VM running", domain_running).await;

    // A floor half the hog below what the host has now (the VM's memory included): crossed
    // only once the test takes its share, with room for the machine's own fluctuation.
    let available = host_available_mib();
    let share = (available / 4).min(2048);
    let floor = available - share / 2;
    env.patch(
        &["-n", NS, "libvirthost", "sys"],
        &format!(
            r#"{{"spec":{{"reclaim":{{"minFreeMemoryMB":{floor},"for":"2s","drainTimeout":"30s","coolDown":"10s"}}}}}}"#
        ),
    );
    wait("the host within its limits", || pressure() == "WithinLimits").await;

    let taken = hog(share);
    let started = Instant::now();
    wait("the ScheduledMachine reclaimed", || {
        sm("{.status.phase}") == "Reclaimed"
    })
    .await;
    let condition = sm(
        "{.status.conditions[?(@.type==\"Reclaimed\")].reason} {.status.conditions[?(@.type==\"Reclaimed\")].message}",
    );
    assert!(
        condition.starts_with("MemoryPressure reclaimed by LibvirtHost sys: available memory")
            && condition.contains(&format!("is below minFreeMemoryMB {floor}")),
        "{condition}"
    );
    wait("the domain gone from the host", || {
        !virsh(&["list", "--all", "--name"]).contains("sys-reclaim")
    })
    .await;
    let removed_after = started.elapsed();
    let events = env.get(&[
        "-n",
        NS,
        "get",
        "events",
        "--field-selector",
        "reason=Reclaiming",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(events.contains("reclaiming ScheduledMachine sys-reclaim"), "{events:?}");
    wait("the host says nothing is left to take", || {
        host("{.status.conditions[?(@.type==\"UnderPressure\")].message}").ends_with("no spot machines left to reclaim")
    })
    .await;

    // Given back: the pressure ends, and after the cool-down the VM returns.
    drop(taken);
    wait("the host within its limits again", || pressure() == "WithinLimits").await;
    wait("the VM back after the cool-down", domain_running).await;
    wait("Active", || sm("{.status.phase}") == "Active").await;
    assert_eq!(
        sm("{.status.conditions[?(@.type==\"Reclaimed\")].reason}"),
        "CoolDownOver"
    );
    eprintln!(
        "real libvirt: {share} MiB taken under a {floor} MiB floor; the spot VM was gone {:.1} s later (for: 2s)",
        removed_after.as_secs_f64()
    );

    env.patch(
        &["-n", NS, "scheduledmachine", "sys-reclaim"],
        r#"{"spec":{"killSwitch":true}}"#,
    );
    wait("Terminated", || sm("{.status.phase}") == "Terminated").await;
    wait("the domain gone", || {
        !virsh(&["list", "--all", "--name"]).contains("sys-reclaim")
    })
    .await;
    env.stop().await;
}
