use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::*;
use crate::api::self_managed_control_plane::SelfManagedControlPlaneSpec;

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn owner() -> SelfManagedControlPlane {
    let mut obj = SelfManagedControlPlane::new("spot", SelfManagedControlPlaneSpec::default());
    obj.metadata.namespace = Some("default".into());
    obj.metadata.uid = Some("smcp-uid".into());
    obj
}

use crate::controllers::self_managed_control_plane::kubeconfig::tests::access;

fn lease() -> Lease {
    Lease {
        token: "tok-abc".into(),
        issued_at: at("2026-01-01T00:00:00Z"),
        expires_at: at("2026-01-02T00:00:00Z"),
    }
}

fn written() -> Secret {
    secret(&owner(), "spot", &access(), &lease())
}

fn classify(secret: &Secret) -> Existing {
    Existing::classify(Some(secret), "smcp-uid", "spot", &access())
}

#[test]
fn renewal_is_due_when_a_third_of_the_lifetime_remains() {
    assert_eq!(lease().renew_at(), at("2026-01-01T16:00:00Z"));
    let ten_minutes = Lease {
        issued_at: at("2026-01-01T00:00:00Z"),
        expires_at: at("2026-01-01T00:10:00Z"),
        ..lease()
    };
    assert_eq!(
        ten_minutes.renew_at(),
        at("2026-01-01T00:06:40Z"),
        "the shortest lifetime the API allows"
    );
}

#[test]
fn the_written_secret_has_the_contract_shape() {
    let s = written();
    assert_eq!(s.metadata.name.as_deref(), Some("spot-kubeconfig"));
    assert_eq!(s.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(s.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
    assert_eq!(s.labels().get(CLUSTER_NAME_LABEL).map(String::as_str), Some("spot"));
    let owner = &s.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("SelfManagedControlPlane", "smcp-uid", Some(true))
    );
    let value = &s.data.as_ref().unwrap()["value"].0;
    assert_eq!(kubeconfig::token(value).as_deref(), Some("tok-abc"));
    assert_eq!(s.annotations()[EXPIRES_AT_ANNOTATION], "2026-01-02T00:00:00Z");
    assert_eq!(s.annotations()[ISSUED_AT_ANNOTATION], "2026-01-01T00:00:00Z");
}

#[test]
fn what_we_wrote_reads_back_as_ours_and_current() {
    assert_eq!(
        classify(&written()),
        Existing::Ours {
            lease: Some(lease()),
            metadata_current: true
        }
    );
    assert_eq!(
        Existing::classify(None, "smcp-uid", "spot", &access()),
        Existing::Absent
    );
}

#[test]
fn a_secret_without_our_owner_reference_is_foreign() {
    let mut s = written();
    s.metadata.owner_references = None;
    assert_eq!(classify(&s), Existing::Foreign);
    s.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "controlplane.cluster.x-k8s.io/v1alpha1".into(),
        kind: "SelfManagedControlPlane".into(),
        name: "spot".into(),
        uid: "an-earlier-incarnation".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    assert_eq!(classify(&s), Existing::Foreign);
    assert_eq!(
        decide(Existing::Foreign, at("2026-01-01T01:00:00Z")),
        Decision::LeaveForeign
    );
}

#[test]
fn any_edit_of_the_value_or_a_new_server_or_ca_loses_the_lease() {
    let edited = |f: &dyn Fn(&mut Secret)| {
        let mut s = written();
        f(&mut s);
        classify(&s)
    };
    let no_lease = Existing::Ours {
        lease: None,
        metadata_current: true,
    };
    // The token swapped for another: the digest no longer matches.
    assert_eq!(
        edited(&|s| {
            let value = kubeconfig::render(&access(), "someone-elses");
            s.data
                .as_mut()
                .unwrap()
                .insert(VALUE_KEY.into(), ByteString(value.into_bytes()));
        }),
        no_lease
    );
    assert_eq!(
        edited(&|s| {
            s.data.as_mut().unwrap().remove(VALUE_KEY);
        }),
        no_lease
    );
    assert_eq!(
        edited(&|s| {
            s.metadata.annotations.as_mut().unwrap().remove(EXPIRES_AT_ANNOTATION);
        }),
        no_lease
    );
    let moved = Access {
        server: "https://kubernetes.default.svc".into(),
        ..access()
    };
    assert!(matches!(
        Existing::classify(Some(&written()), "smcp-uid", "spot", &moved),
        Existing::Ours { lease: None, .. }
    ));
    let rotated_ca = Access {
        ca_pem: None,
        ..access()
    };
    assert!(matches!(
        Existing::classify(Some(&written()), "smcp-uid", "spot", &rotated_ca),
        Existing::Ours { lease: None, .. }
    ));
}

#[test]
fn lost_metadata_is_restored_without_a_new_token() {
    let mut s = written();
    s.metadata.labels = None;
    let existing = classify(&s);
    assert_eq!(
        decide(existing, at("2026-01-01T01:00:00Z")),
        Decision::Keep {
            lease: lease(),
            rewrite: true
        }
    );
}

#[test]
fn mint_when_absent_unreadable_or_due() {
    assert_eq!(decide(Existing::Absent, at("2026-01-01T01:00:00Z")), Decision::Mint);
    assert_eq!(
        decide(
            Existing::Ours {
                lease: None,
                metadata_current: true
            },
            at("2026-01-01T01:00:00Z")
        ),
        Decision::Mint
    );
    let current = || classify(&written());
    assert_eq!(
        decide(current(), at("2026-01-01T15:59:59Z")),
        Decision::Keep {
            lease: lease(),
            rewrite: false
        }
    );
    assert_eq!(decide(current(), at("2026-01-01T16:00:00Z")), Decision::Mint);
}

/// A manager clock three days ahead of the API server's: every token it mints seems to have
/// expired before it was issued. It is kept for the minimum delay all the same; minting anew at
/// once would loop on the watch event of the Secret just written.
#[test]
fn a_token_minted_under_clock_skew_is_kept_for_the_minimum_delay() {
    let skewed = Lease {
        issued_at: at("2026-01-04T00:00:00Z"),
        ..lease()
    };
    let existing = classify(&secret(&owner(), "spot", &access(), &skewed));
    assert_eq!(
        decide(existing.clone(), at("2026-01-04T00:00:29Z")),
        Decision::Keep {
            lease: skewed.clone(),
            rewrite: false
        }
    );
    assert_eq!(decide(existing, at("2026-01-04T00:00:30Z")), Decision::Mint);
    let maintained = Outcome::Maintained {
        secret: "spot-kubeconfig".into(),
        access: access(),
        lease: skewed,
    };
    assert_eq!(requeue(&maintained, at("2026-01-04T00:00:01Z")), Some(MIN_RENEW_DELAY));
}

#[test]
fn requeue_exactly_at_the_renewal_and_never_hot() {
    let maintained = Outcome::Maintained {
        secret: "spot-kubeconfig".into(),
        access: access(),
        lease: lease(),
    };
    assert_eq!(
        requeue(&maintained, at("2026-01-01T10:00:00Z")),
        Some(Duration::from_secs(6 * 3600))
    );
    assert_eq!(
        requeue(&maintained, at("2026-01-01T17:00:00Z")),
        Some(MIN_RENEW_DELAY),
        "a token due as soon as it is minted waits rather than loops"
    );
    let missing = Outcome::ServiceAccountNotFound {
        service_account: "caplv-system/caplv-workload-access".into(),
    };
    assert_eq!(
        requeue(&missing, at("2026-01-01T10:00:00Z")),
        Some(SERVICE_ACCOUNT_RETRY)
    );
    for waiting in [
        Outcome::NoEndpoint { cluster: "spot".into() },
        Outcome::Foreign {
            secret: "spot-kubeconfig".into(),
        },
        Outcome::Paused,
        Outcome::NoCluster,
    ] {
        assert_eq!(requeue(&waiting, at("2026-01-01T10:00:00Z")), None, "{waiting:?}");
    }
}

fn now() -> Time {
    Time("2026-01-01T00:00:00Z".parse().unwrap())
}

#[test]
fn the_contract_fields_are_set_whatever_the_kubeconfig_does() {
    for outcome in [
        Outcome::NoEndpoint { cluster: "spot".into() },
        Outcome::Maintained {
            secret: "spot-kubeconfig".into(),
            access: access(),
            lease: lease(),
        },
    ] {
        let s = status(&SelfManagedControlPlaneStatus::default(), Some(2), &outcome, &now());
        assert!(s.external_managed_control_plane && s.initialized && s.ready);
        assert_eq!(s.initialization.unwrap().control_plane_initialized, Some(true));
        assert_eq!(s.observed_generation, Some(2));
    }
}

#[test]
fn maintained_reports_the_kubeconfig_without_the_token() {
    let outcome = Outcome::Maintained {
        secret: "spot-kubeconfig".into(),
        access: access(),
        lease: lease(),
    };
    let s = status(&SelfManagedControlPlaneStatus::default(), None, &outcome, &now());
    let ready = condition::find(&s.conditions, condition::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "KubeconfigAvailable")
    );
    let kubeconfig = s.kubeconfig.clone().unwrap();
    assert_eq!(kubeconfig.server, "https://api.spot.labdroid.net:6443");
    assert_eq!(kubeconfig.service_account, "caplv-system/caplv-workload-access");
    assert_eq!(
        kubeconfig.renew_at.unwrap(),
        Time("2026-01-01T16:00:00Z".parse().unwrap())
    );
    let text = serde_json::to_string(&s).unwrap() + &format!("{outcome:?}");
    assert!(!text.contains("tok-abc"), "{text}");
    assert_eq!(
        status(&s, None, &outcome, &now()),
        s,
        "an unchanged outcome is an unchanged status: no write"
    );
}

#[test]
fn problems_are_named_in_ready_and_a_foreign_secret_is_not_ours_to_report() {
    let maintained = status(
        &SelfManagedControlPlaneStatus::default(),
        None,
        &Outcome::Maintained {
            secret: "spot-kubeconfig".into(),
            access: access(),
            lease: lease(),
        },
        &now(),
    );
    let reason = |s: &SelfManagedControlPlaneStatus| {
        let c = condition::find(&s.conditions, condition::READY).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    let no_endpoint = status(
        &maintained,
        None,
        &Outcome::NoEndpoint { cluster: "spot".into() },
        &now(),
    );
    let (st, why, message) = reason(&no_endpoint);
    assert_eq!((st.as_str(), why.as_str()), ("False", "NoControlPlaneEndpoint"));
    assert!(
        message.contains("spec.server") && message.contains("\"spot\""),
        "{message}"
    );
    assert!(
        no_endpoint.kubeconfig.is_some(),
        "the Secret written earlier is still there"
    );

    let foreign = status(
        &maintained,
        None,
        &Outcome::Foreign {
            secret: "spot-kubeconfig".into(),
        },
        &now(),
    );
    let (st, why, message) = reason(&foreign);
    assert_eq!((st.as_str(), why.as_str()), ("True", "UserProvidedKubeconfig"));
    assert!(message.contains("not owned"), "{message}");
    assert!(foreign.kubeconfig.is_none());

    let missing = status(
        &SelfManagedControlPlaneStatus::default(),
        None,
        &Outcome::ServiceAccountNotFound {
            service_account: "caplv-system/caplv-workload-access".into(),
        },
        &now(),
    );
    assert_eq!(reason(&missing).1, "WorkloadServiceAccountNotFound");

    let paused = status(&maintained, None, &Outcome::Paused, &now());
    assert!(condition::is_true(&paused.conditions, condition::PAUSED));
    assert_eq!(reason(&paused).1, "KubeconfigAvailable", "Ready is left as it was");
}
