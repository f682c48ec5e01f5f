use super::*;
use crate::api::ignition_config::{IgnitionConfigSpec, IgnitionSecretReference};

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPlanTestSecretKey";

fn time(s: &str) -> Time {
    Time(s.parse().unwrap())
}

fn config() -> IgnitionConfig {
    let mut c = IgnitionConfig::new(
        "w1",
        IgnitionConfigSpec {
            secret_ref: IgnitionSecretReference {
                name: "src".into(),
                key: "value".into(),
            },
        },
    );
    c.metadata.namespace = Some("default".into());
    c.metadata.uid = Some("uid-1".into());
    c.metadata.generation = Some(2);
    c
}

fn source(pairs: &[(&str, &[u8])]) -> Secret {
    Secret {
        data: Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

fn ignition_with_key() -> Vec<u8> {
    format!(
        r#"{{"ignition":{{"version":"3.4.0"}},"passwd":{{"users":[{{"name":"core","sshAuthorizedKeys":["{KEY}"]}}]}}}}"#
    )
    .into_bytes()
}

fn active(source: Result<Payload, Problem>, existing: Existing) -> Observation {
    Observation::Active {
        source,
        existing,
        cluster_name: Some("spot".into()),
    }
}

fn ready_of(status: &IgnitionConfigStatus) -> (String, String, String) {
    let c = condition::find(&status.conditions, condition::READY).unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn ignition_source_is_passed_through_unchanged() {
    let bytes = ignition_with_key();
    let p = payload("src", "value", Some(&source(&[("value", &bytes)]))).unwrap();
    assert_eq!(p.json, bytes);
    assert_eq!(p.version, "3.4.0");
    assert!(!p.from_butane);
    let explicit = payload(
        "src",
        "value",
        Some(&source(&[("value", &bytes), ("format", b" Ignition\n")])),
    );
    assert_eq!(explicit.unwrap().json, bytes);
}

#[test]
fn butane_source_is_translated() {
    let yaml = format!(
        "variant: fcos\nversion: 1.5.0\npasswd:\n  users:\n    - name: core\n      ssh_authorized_keys: [\"{KEY}\"]\n"
    );
    let p = payload(
        "src",
        "value",
        Some(&source(&[("value", yaml.as_bytes()), ("format", b"butane\n")])),
    )
    .unwrap();
    assert!(p.from_butane);
    assert_eq!(p.version, "3.4.0");
    crate::ignition::validate(&p.json).unwrap();
}

#[test]
fn each_source_problem_has_its_reason_and_never_the_content() {
    let mut spec2 = ignition_with_key();
    spec2 = String::from_utf8(spec2).unwrap().replace("3.4.0", "2.2.0").into_bytes();
    let not_json = format!("{{not json {KEY}").into_bytes();
    let big = vec![b' '; MAX_CONFIG_BYTES + 1];
    let bad_butane = format!("variant: fcos\nversion: 1.5.0\nstorage:\n  filesystems:\n    - device: {KEY}\n");
    let cases: Vec<(Option<Secret>, &str)> = vec![
        (None, "SourceSecretNotFound"),
        (Some(source(&[("other", &spec2)])), "SourceKeyNotFound"),
        (Some(source(&[("value", &not_json)])), "InvalidJSON"),
        (Some(source(&[("value", &spec2)])), "IgnitionSpec2"),
        (Some(source(&[("value", &big)])), "TooLarge"),
        (
            Some(source(&[("value", &ignition_with_key()), ("format", b"cloud-config")])),
            "UnsupportedFormat",
        ),
        (
            Some(source(&[("value", bad_butane.as_bytes()), ("format", b"butane")])),
            "UnsupportedButaneField",
        ),
    ];
    for (secret, want) in cases {
        let problem = payload("src", "value", secret.as_ref()).unwrap_err();
        assert_eq!(problem.reason().as_str(), want);
        let message = problem.message();
        assert!(!message.contains(KEY), "{message}");
        assert!(message.contains("src"), "{message}");
        if want == "UnsupportedButaneField" {
            assert!(message.contains("storage.filesystems"), "{message}");
        }
    }
}

#[test]
fn first_success_writes_the_contract_secret_and_latches() {
    let p = payload("src", "value", Some(&source(&[("value", &ignition_with_key())]))).unwrap();
    let plan = plan(
        &config(),
        &active(Ok(p.clone()), Existing::Absent),
        &time("2026-01-01T00:00:00Z"),
    );
    let secret = plan.write.unwrap();
    assert_eq!(secret.metadata.name.as_deref(), Some("w1"));
    assert_eq!(secret.type_.as_deref(), Some(DATA_SECRET_TYPE));
    let data = secret.data.as_ref().unwrap();
    assert_eq!(data["value"].0, p.json);
    assert_eq!(data["format"].0, b"ignition");
    assert_eq!(secret.labels()[CLUSTER_NAME_LABEL], "spot");
    let owner = &secret.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("IgnitionConfig", "uid-1", Some(true))
    );
    assert!(plan.status.ready);
    assert_eq!(plan.status.data_secret_name.as_deref(), Some("w1"));
    assert_eq!(
        plan.status.initialization.as_ref().unwrap().data_secret_created,
        Some(true)
    );
    assert_eq!(plan.status.observed_generation, Some(2));
    let (status, reason, message) = ready_of(&plan.status);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "DataSecretCreated"));
    assert!(message.contains("3.4.0") && !message.contains(KEY), "{message}");
}

/// The valid payload and the plan of a config's first pass, with no data Secret yet.
fn first_write() -> (Payload, Plan) {
    let p = payload("src", "value", Some(&source(&[("value", &ignition_with_key())]))).unwrap();
    let first = plan(
        &config(),
        &active(Ok(p.clone()), Existing::Absent),
        &time("2026-01-01T00:00:00Z"),
    );
    (p, first)
}

#[test]
fn an_identical_secret_is_not_rewritten_and_the_status_is_stable() {
    let (p, first) = first_write();
    let mut c = config();
    let mut stored = first.write.clone().unwrap();
    stored
        .data
        .as_mut()
        .unwrap()
        .insert("extra".into(), ByteString(b"x".to_vec()));
    c.status = Some(first.status.clone());
    let second = plan(
        &c,
        &active(Ok(p), Existing::Ours(Box::new(stored))),
        &time("2026-01-01T00:01:00Z"),
    );
    assert_eq!(second.write, None);
    assert_eq!(second.status, first.status);
}

#[test]
fn a_secret_known_unchanged_is_rewritten_only_when_the_wanted_one_changes() {
    let (p, first) = first_write();
    let mut c = config();
    let written = first.fingerprint.expect("a payload has a fingerprint");
    assert_eq!(Some(written), first.write.as_ref().map(fingerprint));
    c.status = Some(first.status.clone());
    let same = plan(
        &c,
        &active(Ok(p.clone()), Existing::Unchanged(written)),
        &time("2026-01-01T00:01:00Z"),
    );
    assert_eq!((same.write, same.fingerprint), (None, Some(written)));
    assert_eq!(same.status, first.status);

    // Adopted into another cluster: the label we set changes, so the Secret is rewritten.
    let relabelled = plan(
        &c,
        &Observation::Active {
            source: Ok(p),
            existing: Existing::Unchanged(written),
            cluster_name: Some("other".to_owned()),
        },
        &time("2026-01-01T00:02:00Z"),
    );
    let rewrite = relabelled.write.expect("rewritten");
    assert_eq!(rewrite.labels()[CLUSTER_NAME_LABEL], "other");
    assert_ne!(relabelled.fingerprint, Some(written));
}

#[test]
fn an_edited_or_relabelled_secret_is_restored() {
    let p = payload("src", "value", Some(&source(&[("value", &ignition_with_key())]))).unwrap();
    let desired = data_secret(&config(), &p, Some("spot"));
    let mut edited = desired.clone();
    edited
        .data
        .as_mut()
        .unwrap()
        .insert("value".into(), ByteString(b"{}".to_vec()));
    assert!(differs(&edited, &desired));
    let mut unlabelled = desired.clone();
    unlabelled.metadata.labels = None;
    assert!(differs(&unlabelled, &desired));
    assert!(!differs(&desired, &data_secret(&config(), &p, None)));
}

#[test]
fn a_foreign_secret_is_a_conflict_and_never_written() {
    let p = payload("src", "value", Some(&source(&[("value", &ignition_with_key())]))).unwrap();
    let found = Secret::default();
    let existing = Existing::classify(Some(found), "uid-1");
    assert_eq!(existing, Existing::Foreign);
    let plan = plan(&config(), &active(Ok(p), existing), &time("2026-01-01T00:00:00Z"));
    assert_eq!(plan.write, None);
    assert!(!plan.status.ready);
    assert_eq!(plan.status.data_secret_name, None);
    assert_eq!(ready_of(&plan.status).1, "DataSecretConflict");
}

#[test]
fn a_later_problem_keeps_ready_latched_and_writes_nothing() {
    let p = payload("src", "value", Some(&source(&[("value", &ignition_with_key())]))).unwrap();
    let mut c = config();
    let up = plan(&c, &active(Ok(p), Existing::Absent), &time("2026-01-01T00:00:00Z"));
    c.status = Some(up.status);
    let problem = payload("src", "value", Some(&source(&[("value", b"{not json")]))).unwrap_err();
    let down = plan(
        &c,
        &active(Err(problem), Existing::Absent),
        &time("2026-01-01T00:01:00Z"),
    );
    assert_eq!(down.write, None);
    assert!(down.status.ready, "dataSecretCreated is a one-time signal");
    assert_eq!(down.status.data_secret_name.as_deref(), Some("w1"));
    let (status, reason, _) = ready_of(&down.status);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidJSON"));
}

#[test]
fn a_first_problem_is_not_ready() {
    let plan = plan(
        &config(),
        &active(Err(Problem::SecretNotFound { secret: "src".into() }), Existing::Absent),
        &time("2026-01-01T00:00:00Z"),
    );
    assert!(!plan.status.ready);
    assert_eq!(
        plan.status.initialization.as_ref().unwrap().data_secret_created,
        Some(false)
    );
    assert_eq!(ready_of(&plan.status).1, "SourceSecretNotFound");
}

#[test]
fn paused_only_sets_the_paused_condition() {
    let p = payload("src", "value", Some(&source(&[("value", &ignition_with_key())]))).unwrap();
    let mut c = config();
    let up = plan(&c, &active(Ok(p), Existing::Absent), &time("2026-01-01T00:00:00Z"));
    c.status = Some(up.status.clone());
    let paused = plan(&c, &Observation::Paused, &time("2026-01-01T00:01:00Z"));
    assert_eq!(paused.write, None);
    assert!(condition::is_true(&paused.status.conditions, condition::PAUSED));
    assert_eq!(
        condition::find(&paused.status.conditions, condition::READY),
        condition::find(&up.status.conditions, condition::READY)
    );
    assert!(paused.status.ready);
}
