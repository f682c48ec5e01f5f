//! Where secrets must never show: the manager's log, the Events, the metrics, and the objects'
//! statuses and conditions (every error message ends up in one of these).

use std::io::{Read, Write};

use super::Genuine;

/// A secret value and what it is, for the failure message (never the value itself).
pub struct Secret {
    pub what: &'static str,
    pub value: String,
}

/// The distinctive lines of a PEM or OpenSSH private key: its base64 body.
pub fn key_lines(what: &'static str, pem: &str) -> Vec<Secret> {
    pem.lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 32)
        .map(|l| Secret {
            what,
            value: l.to_owned(),
        })
        .collect()
}

/// The bearer token of the kubeconfig in Secret `name` (the one the manager mints).
pub fn kubeconfig_token(env: &Genuine, name: &str) -> Secret {
    let encoded = env.get(&["get", "secret", name, "-o", "jsonpath={.data.value}"]);
    let kubeconfig = String::from_utf8(base64_decode(&encoded)).unwrap();
    let token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches('"').to_owned())
        .filter(|t| t.len() >= 16)
        .expect("the kubeconfig carries a token");
    Secret {
        what: "the workload kubeconfig's token",
        value: token,
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s.trim()).unwrap()
}

/// The manager's log without colour codes.
pub(super) fn manager_log(env: &Genuine) -> String {
    let raw = std::fs::read_to_string(env.dir.path().join("manager.log")).unwrap();
    let mut plain = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// The manager's `/metrics`, at the address it logged.
pub(super) fn metrics(log: &str) -> String {
    let addr = log
        .lines()
        .filter(|l| l.contains("serving /metrics"))
        .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("addr=")))
        .expect("the manager logged its metrics address");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    assert!(text.contains("caplv_"), "metrics served: {text}");
    text
}

/// No secret in the objects' statuses (with their conditions) as they stand now.
pub fn assert_not_in_statuses(env: &Genuine, secrets: &[Secret]) {
    let kinds = "scheduledmachines,ignitionconfigs,libvirtmachines,libvirthosts,libvirtclusters,\
                 selfmanagedcontrolplanes,machines,clusters";
    let objects = env.get(&[
        "get",
        kinds,
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.status}{\"\\n\"}{end}",
    ]);
    assert!(objects.contains("conditions"), "statuses read: {objects}");
    assert_absent("the objects' statuses", &objects, secrets);
}

/// No secret in the manager's log (it must have logged at trace), its Events or its metrics.
pub fn assert_not_in_log_events_or_metrics(env: &Genuine, secrets: &[Secret]) {
    let log = manager_log(env);
    assert!(log.contains(" TRACE "), "the manager logged at trace level");
    assert_absent("the manager's log", &log, secrets);
    let events = env.get(&["get", "events.events.k8s.io", "-A", "-o", "json"]);
    assert!(events.contains("ScheduledMachine"), "the manager's Events read");
    assert_absent("the Events", &events, secrets);
    assert_absent("the metrics", &metrics(&log), secrets);
}

fn assert_absent(place: &str, text: &str, secrets: &[Secret]) {
    for secret in secrets {
        assert!(!text.contains(&secret.value), "{} appears in {place}", secret.what);
    }
}
