use super::*;

fn c(name: &str, priority: i64, age_s: i64, vcpus: i64, mem: i64) -> Candidate {
    Candidate {
        uid: format!("uid-{name}"),
        name: name.to_owned(),
        priority,
        created: Some(Timestamp::from_second(1_700_000_000 - age_s).unwrap()),
        request: Resources { vcpus, memory_mib: mem },
    }
}

const FREE: Resources = Resources {
    vcpus: 8,
    memory_mib: 16_384,
};

#[test]
fn a_machine_that_fits_alone_is_admitted_with_its_request() {
    let m = c("a", 0, 10, 4, 8192);
    assert_eq!(
        decide(&m, &[], FREE),
        Admission::Admitted(Resources {
            vcpus: 4,
            memory_mib: 8192
        })
    );
}

#[test]
fn zero_means_all_that_is_free_at_its_turn() {
    let m = c("auto", 0, 10, 0, 0);
    assert_eq!(decide(&m, &[], FREE), Admission::Admitted(FREE));
    let half = c("half", 5, 10, 4, 0);
    assert_eq!(
        decide(&half, &[], FREE),
        Admission::Admitted(Resources {
            vcpus: 4,
            memory_mib: 16_384
        })
    );
    // Nothing free: an auto-sized machine waits instead of getting a zero-sized domain.
    let none = Resources {
        vcpus: 0,
        memory_mib: 0,
    };
    assert!(matches!(decide(&m, &[], none), Admission::Wait(_)));
}

#[test]
fn too_big_waits_and_says_what_is_free() {
    let m = c("big", 0, 10, 12, 8192);
    let Admission::Wait(msg) = decide(&m, &[], FREE) else {
        panic!("must wait")
    };
    assert!(msg.contains("needs 12 vCPUs") && msg.contains("8 vCPUs"), "{msg}");
}

#[test]
fn higher_priority_goes_first_and_holds_the_line() {
    let low = c("low", 1, 100, 2, 1024);
    let high = c("high", 10, 1, 8, 1024);
    // high fits alone, and low does not fit after it: low waits behind it.
    let Admission::Wait(msg) = decide(&low, std::slice::from_ref(&high), FREE) else {
        panic!("low must wait behind high")
    };
    assert!(msg.contains("ahead"), "{msg}");
    assert!(matches!(
        decide(&high, std::slice::from_ref(&low), FREE),
        Admission::Admitted(_)
    ));
    // A high-priority machine that does not fit holds smaller ones (no starvation).
    let huge = c("huge", 10, 1, 64, 1024);
    let Admission::Wait(msg) = decide(&low, std::slice::from_ref(&huge), FREE) else {
        panic!("low must wait behind huge")
    };
    assert!(msg.contains("\"huge\""), "{msg}");
}

#[test]
fn equal_priority_is_first_come_first_served() {
    let old = c("old", 0, 100, 6, 1024);
    let young = c("young", 0, 1, 6, 1024);
    assert!(matches!(
        decide(&old, std::slice::from_ref(&young), FREE),
        Admission::Admitted(_)
    ));
    assert!(matches!(
        decide(&young, std::slice::from_ref(&old), FREE),
        Admission::Wait(_)
    ));
}

#[test]
fn machines_that_fit_together_are_admitted_together() {
    let a = c("a", 3, 5, 4, 4096);
    let b = c("b", 2, 5, 4, 4096);
    assert!(matches!(
        decide(&a, std::slice::from_ref(&b), FREE),
        Admission::Admitted(_)
    ));
    assert!(matches!(
        decide(&b, std::slice::from_ref(&a), FREE),
        Admission::Admitted(_)
    ));
}

#[test]
fn offered_is_total_minus_reservation_clamped() {
    let spec: LibvirtHostSpec = serde_json::from_value(serde_json::json!({
        "uri": "test:///default",
        "reservedResources": {"vcpus": 2, "memoryMB": 4096}
    }))
    .unwrap();
    assert_eq!(
        offered_from(&spec, 16, 31_560),
        Resources {
            vcpus: 14,
            memory_mib: 27_464
        }
    );
    assert_eq!(offered_from(&spec, 1, 1024), Resources::default());
}

#[test]
fn overcommit_scales_what_is_left_after_the_reservation() {
    let spec: LibvirtHostSpec = serde_json::from_value(serde_json::json!({
        "uri": "test:///default",
        "reservedResources": {"vcpus": 1, "memoryMB": 1024},
        "overcommit": {"cpuRatio": 2.5, "memoryRatio": 0.5}
    }))
    .unwrap();
    // (4 - 1) * 2.5 = 7.5, rounded down; (8192 - 1024) * 0.5.
    assert_eq!(
        offered_from(&spec, 4, 8192),
        Resources {
            vcpus: 7,
            memory_mib: 3584
        }
    );
    let host: LibvirtHost = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "LibvirtHost",
        "metadata": {"name": "small", "namespace": "ns"},
        "spec": spec,
        "status": {"capacity": {"totalVCPUs": 4, "totalMemoryMB": 8192, "availableVCPUs": 7, "availableMemoryMB": 3584}}
    }))
    .unwrap();
    assert_eq!(
        describe_host(&host),
        "host small: 4 vCPUs and 8192 MiB in all, reservedResources 1 vCPUs and 1024 MiB, overcommit cpuRatio 2.5 and memoryRatio 0.5"
    );
}

#[test]
fn priority_label_is_read_and_bad_values_count_as_zero() {
    let mut m: LibvirtMachine = serde_json::from_value(serde_json::json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "LibvirtMachine",
        "metadata": {"name": "m", "namespace": "ns", "uid": "u", "labels": {"5spot.finos.org/priority": "70"}},
        "spec": {
            "hostRef": {"name": "h"},
            "domain": {"vcpus": 2, "memoryMB": 2048},
            "rootDisk": {"baseImage": "b", "storagePool": "p", "size": "20Gi"},
            "network": {"type": "network", "name": "default", "addresses": ["10.0.0.2/24"]}
        }
    }))
    .unwrap();
    let cand = Candidate::of(&m);
    assert_eq!(
        (cand.priority, cand.request.vcpus, cand.request.memory_mib),
        (70, 2, 2048)
    );
    m.labels_mut().insert(PRIORITY_LABEL.to_owned(), "high".to_owned());
    assert_eq!(Candidate::of(&m).priority, 0);
}
