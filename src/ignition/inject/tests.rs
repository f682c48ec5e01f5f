use super::*;
use crate::ignition::dataurl::decode;
use crate::ignition::facts::NetworkFacts;
use crate::ignition::keyfile::{Keyfile, parse};
use crate::ignition::validate::SUPPORTED_VERSIONS;
use ignition_config::Config;
use proptest::prelude::*;

const PID: &str = "libvirt:///6f1d2c3b-aaaa-bbbb-cccc-0123456789ab";

fn facts(addrs: &[&str]) -> MachineFacts {
    MachineFacts {
        node_name: "default-lab-worker-a1".into(),
        provider_id: PID.into(),
        network: NetworkFacts {
            interface_name: "enp1s0".into(),
            addresses: addrs.iter().map(|s| (*s).to_owned()).collect(),
            gateway: None,
            ipv6_gateway: None,
            nameservers: vec![],
            search_domains: vec![],
            mac_address: None,
            dhcp: false,
        },
        additional_networks: vec![],
    }
}

fn v4() -> MachineFacts {
    let mut f = facts(&["192.168.122.50/24"]);
    f.network.gateway = Some("192.168.122.1".into());
    f.network.nameservers = vec!["192.168.122.1".into()];
    f
}

/// Parses `json` back with ignition-config and checks it is `version`.
fn parses_at(json: &[u8], version: &str) {
    let (cfg, warnings) = Config::parse_slice(json).unwrap();
    let got = match cfg {
        Config::V3_0(_) => "3.0.0",
        Config::V3_1(_) => "3.1.0",
        Config::V3_2(_) => "3.2.0",
        Config::V3_3(_) => "3.3.0",
        Config::V3_4(_) => "3.4.0",
        Config::V3_5(_) => "3.5.0",
        Config::V3_6(_) => "3.6.0",
        _ => "other",
    };
    assert_eq!(got, version);
    assert!(warnings.is_empty(), "{warnings:?}");
}

/// All entries of `storage.<kind>` with `path`.
fn entries<'a>(v: &'a Value, kind: &str, path: &str) -> Vec<&'a Value> {
    v["storage"][kind]
        .as_array()
        .map(|a| a.iter().filter(|e| e["path"] == path).collect())
        .unwrap_or_default()
}

/// The one file at `path`: checks mode and overwrite, returns its decoded text.
fn file(v: &Value, path: &str, mode: u64) -> String {
    let found = entries(v, "files", path);
    assert_eq!(found.len(), 1, "{path} must appear exactly once");
    let f = found[0];
    assert_eq!(f["mode"], mode, "{path}");
    assert_eq!(f["overwrite"], true, "{path}");
    let source = f["contents"]["source"].as_str().unwrap();
    let compression = f["contents"]["compression"].as_str();
    String::from_utf8(decode(source, compression).unwrap()).unwrap()
}

fn rendered(bootstrap: &str, f: &MachineFacts) -> (Rendered, Value) {
    let r = render(bootstrap.as_bytes(), f).unwrap();
    assert_eq!(r.size, r.json.len());
    parses_at(&r.json, &r.version);
    let v: Value = serde_json::from_slice(&r.json).unwrap();
    (r, v)
}

fn keyfile_of(v: &Value, iface: &str) -> Keyfile {
    parse(&file(
        v,
        &format!("/etc/NetworkManager/system-connections/{iface}.nmconnection"),
        384,
    ))
    .unwrap()
}

fn assert_keys(kf: &Keyfile, group: &str, expected: &[(&str, &str)]) {
    let got: Vec<(&str, &str)> = kf
        .keys(group)
        .unwrap_or_default()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(got, expected, "[{group}]");
}

/// Hand-written minimal bootstrap configs, one per spec version, each with something to keep
/// and some with entries at our paths.
fn bootstrap_for(version: &str) -> String {
    match version {
            "3.0.0" => r#"{"ignition":{"version":"3.0.0"}}"#.into(),
            "3.1.0" => r#"{"ignition":{"version":"3.1.0","config":{"merge":[{"source":"https://api-int.lab.example:22623/config/worker"}]},
                "security":{"tls":{"certificateAuthorities":[{"source":"data:text/plain;charset=utf-8;base64,Q0EK"}]}}}}"#
                .into(),
            "3.2.0" => r#"{"ignition":{"version":"3.2.0"},"storage":{"files":[
                {"path":"/etc/hostname","mode":420,"overwrite":true,"contents":{"source":"data:,old-name"}},
                {"path":"/etc/motd","contents":{"source":"data:,hi"}}]}}"#
                .into(),
            "3.3.0" => r#"{"ignition":{"version":"3.3.0"},"storage":{"files":[
                {"path":"/etc/NetworkManager/system-connections/enp1s0.nmconnection","mode":384,"contents":{"source":"data:,%5Bconnection%5D"}},
                {"path":"//etc/./hostname","contents":{"source":"data:,x"}}]},
                "systemd":{"units":[{"name":"kubelet.service","enabled":true,"dropins":[{"name":"10-x.conf","contents":"[Service]\n"}]}]},
                "kernelArguments":{"shouldExist":["quiet"]}}"#
                .into(),
            "3.4.0" => r#"{"ignition":{"version":"3.4.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAAC3Nza core@lab"]}]},
                "storage":{"links":[{"path":"/etc/hostname","target":"/run/hostname"}],"directories":[{"path":"/var/lib/keep"}]}}"#
                .into(),
            "3.5.0" => r#"{"ignition":{"version":"3.5.0"},"storage":null,"systemd":{"units":[{"name":"a.service","mask":true}]}}"#.into(),
            "3.6.0" => r#"{"ignition":{"version":"3.6.0"},"storage":{"files":[
                {"path":"/etc/systemd/system/kubelet.service.d/90-provider-id.conf","contents":{"source":"data:,old"}},
                {"path":"/etc/systemd/system/kubelet.service.d/90-provider-id.conf/","contents":{"source":"data:,dup"}},
                {"path":"/opt/big","contents":{"source":"data:;base64,H4sIAAAAAAAA/w==","compression":"gzip"}}]}}"#
                .into(),
            other => panic!("{other}"),
        }
}

#[test]
fn golden_every_version() {
    for version in SUPPORTED_VERSIONS {
        let input = bootstrap_for(version);
        let (r, v) = rendered(&input, &v4());
        assert_eq!(r.version, version);
        assert_eq!(v["ignition"]["version"], version);
        assert_eq!(file(&v, HOSTNAME_PATH, 420), "default-lab-worker-a1\n");
        assert_eq!(
            file(&v, PROVIDER_ID_DROPIN_PATH, 420),
            format!("[Service]\nEnvironment=\"KUBELET_PROVIDERID={PID}\"\n")
        );
        let kf = keyfile_of(&v, "enp1s0");
        assert_eq!(kf.group_names(), vec!["connection", "ipv4", "ipv6"]);
        assert_keys(
            &kf,
            "connection",
            &[
                ("id", "enp1s0"),
                ("type", "ethernet"),
                ("interface-name", "enp1s0"),
                ("autoconnect", "true"),
            ],
        );
        assert_keys(
            &kf,
            "ipv4",
            &[
                ("method", "manual"),
                ("address1", "192.168.122.50/24,192.168.122.1"),
                ("dns", "192.168.122.1;"),
                ("may-fail", "false"),
            ],
        );
        assert_keys(&kf, "ipv6", &[("method", "disabled")]);
        // Nothing else at our paths: no link, no directory, no non-normalised duplicate.
        let input_v: Value = serde_json::from_str(&input).unwrap();
        for kind in ["files", "directories", "links"] {
            let all = v["storage"][kind].as_array().cloned().unwrap_or_default();
            for e in &all {
                let p = clean_path(e["path"].as_str().unwrap());
                let ours =
                    [HOSTNAME_PATH, PROVIDER_ID_DROPIN_PATH].contains(&p.as_str()) || p.ends_with(".nmconnection");
                assert!(!ours || kind == "files", "{kind} {p}");
            }
            // Everything else from the input survives.
            for e in input_v["storage"][kind].as_array().cloned().unwrap_or_default() {
                let p = clean_path(e["path"].as_str().unwrap());
                let ours =
                    [HOSTNAME_PATH, PROVIDER_ID_DROPIN_PATH].contains(&p.as_str()) || p.ends_with(".nmconnection");
                if !ours {
                    assert!(all.contains(&e), "{version}: lost {e}");
                }
            }
        }
        for key in ["systemd", "passwd", "kernelArguments"] {
            assert_eq!(v.get(key), input_v.get(key), "{version}: {key}");
        }
        assert_eq!(v["ignition"], input_v["ignition"], "{version}");
    }
}

#[test]
fn replace_not_duplicate_counts() {
    let (_, v) = rendered(&bootstrap_for("3.2.0"), &v4());
    let files = v["storage"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 4, "motd + our three");
    assert_eq!(files[0]["path"], "/etc/motd");
    let (_, v) = rendered(&bootstrap_for("3.6.0"), &v4());
    assert_eq!(v["storage"]["files"].as_array().unwrap().len(), 4, "big + our three");
    let (_, v) = rendered(&bootstrap_for("3.4.0"), &v4());
    assert!(v["storage"]["links"].as_array().unwrap().is_empty());
    assert_eq!(v["storage"]["directories"].as_array().unwrap().len(), 1);
}

#[test]
fn rendering_is_idempotent() {
    let (first, _) = rendered(&bootstrap_for("3.3.0"), &v4());
    let again = render(&first.json, &v4()).unwrap();
    assert_eq!(first, again);
}

#[test]
fn ipv6_only() {
    let mut f = facts(&["fd00:10::50/64"]);
    f.network.ipv6_gateway = Some("fd00:10::1".into());
    f.network.nameservers = vec!["fd00:10::53".into()];
    f.network.search_domains = vec!["lab.example".into()];
    let (_, v) = rendered(&bootstrap_for("3.4.0"), &f);
    let kf = keyfile_of(&v, "enp1s0");
    assert_keys(&kf, "ipv4", &[("method", "disabled")]);
    assert_keys(
        &kf,
        "ipv6",
        &[
            ("method", "manual"),
            ("address1", "fd00:10::50/64,fd00:10::1"),
            ("dns", "fd00:10::53;"),
            ("dns-search", "lab.example;"),
            ("may-fail", "false"),
        ],
    );
}

#[test]
fn dual_stack_with_mac_and_dns_split() {
    let mut f = facts(&["10.0.0.50/24", "fd00::50/64", "10.0.1.50/24", "fd00:1::50/64"]);
    f.network.interface_name = "ens3".into();
    f.network.gateway = Some("10.0.1.1".into());
    f.network.ipv6_gateway = Some("fe80::1".into());
    f.network.nameservers = vec!["10.0.0.53".into(), "fd00::53".into(), "10.0.0.54".into()];
    f.network.search_domains = vec!["a.example".into(), "b.example".into()];
    f.network.mac_address = Some("52:54:00:0a:0b:0c".into());
    let (r, v) = rendered(&bootstrap_for("3.5.0"), &f);
    assert_eq!(r.version, "3.5.0");
    let kf = keyfile_of(&v, "ens3");
    assert_eq!(kf.group_names(), vec!["connection", "ethernet", "ipv4", "ipv6"]);
    assert_keys(
        &kf,
        "connection",
        &[
            ("id", "ens3"),
            ("type", "ethernet"),
            ("interface-name", "ens3"),
            ("autoconnect", "true"),
        ],
    );
    assert_keys(&kf, "ethernet", &[("mac-address", "52:54:00:0A:0B:0C")]);
    assert_keys(
        &kf,
        "ipv4",
        &[
            ("method", "manual"),
            ("address1", "10.0.0.50/24,10.0.1.1"),
            ("address2", "10.0.1.50/24"),
            ("dns", "10.0.0.53;10.0.0.54;"),
            ("dns-search", "a.example;b.example;"),
            ("may-fail", "false"),
        ],
    );
    assert_keys(
        &kf,
        "ipv6",
        &[
            ("method", "manual"),
            ("address1", "fd00::50/64,fe80::1"),
            ("address2", "fd00:1::50/64"),
            ("dns", "fd00::53;"),
            ("may-fail", "false"),
        ],
    );
    assert!(
        entries(
            &v,
            "files",
            "/etc/NetworkManager/system-connections/enp1s0.nmconnection"
        )
        .is_empty()
    );
}

#[test]
fn dns_variants() {
    // No DNS at all, no gateway.
    let (_, v) = rendered(&bootstrap_for("3.0.0"), &facts(&["10.0.0.50/24"]));
    assert_keys(
        &keyfile_of(&v, "enp1s0"),
        "ipv4",
        &[
            ("method", "manual"),
            ("address1", "10.0.0.50/24"),
            ("may-fail", "false"),
        ],
    );
    // Search domains only.
    let mut f = facts(&["10.0.0.50/24"]);
    f.network.search_domains = vec!["lab.example".into()];
    let (_, v) = rendered(&bootstrap_for("3.0.0"), &f);
    let kf = keyfile_of(&v, "enp1s0");
    assert_eq!(kf.get("ipv4", "dns"), None);
    assert_eq!(kf.get("ipv4", "dns-search"), Some("lab.example;"));
    // Name servers only.
    let mut f = facts(&["10.0.0.50/24"]);
    f.network.nameservers = vec!["10.0.0.53".into(), "10.0.0.54".into(), "10.0.0.55".into()];
    let (_, v) = rendered(&bootstrap_for("3.0.0"), &f);
    let kf = keyfile_of(&v, "enp1s0");
    assert_eq!(kf.get("ipv4", "dns"), Some("10.0.0.53;10.0.0.54;10.0.0.55;"));
    assert_eq!(kf.get("ipv4", "dns-search"), None);
}

#[test]
fn large_keyfile_is_gzipped_and_small_files_are_not() {
    let addrs: Vec<String> = (1..=16).map(|i| format!("10.0.{i}.50/24")).collect();
    let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let mut f = facts(&refs);
    f.network.search_domains = (0..6).map(|i| format!("zone{i}.lab.example")).collect();
    let (r, v) = rendered(&bootstrap_for("3.0.0"), &f);
    let path = "/etc/NetworkManager/system-connections/enp1s0.nmconnection";
    assert_eq!(entries(&v, "files", path)[0]["contents"]["compression"], "gzip");
    assert_eq!(keyfile_of(&v, "enp1s0").get("ipv4", "address16"), Some("10.0.16.50/24"));
    assert!(
        entries(&v, "files", HOSTNAME_PATH)[0]["contents"]
            .get("compression")
            .is_none()
    );
    assert!(r.size < 2048, "payload {} bytes", r.size);
}

#[test]
fn payload_stays_small() {
    let (r, _) = rendered(&bootstrap_for("3.1.0"), &v4());
    assert!(r.size < 1500, "payload {} bytes", r.size);
}

#[test]
fn errors() {
    let e = render(br#"{"ignition":{"version":"2.2.0"}}"#, &v4()).unwrap_err();
    assert_eq!(e.reason().as_str(), "IgnitionSpec2");
    let e = render(b"{", &v4()).unwrap_err();
    assert_eq!(e.reason().as_str(), "InvalidJSON");
    let e = render(&vec![b' '; crate::ignition::MAX_CONFIG_BYTES + 1], &v4()).unwrap_err();
    assert_eq!(e.reason().as_str(), "TooLarge");
    let mut f = v4();
    f.network.gateway = Some("192.168.200.1".into());
    let e = render(bootstrap_for("3.2.0").as_bytes(), &f).unwrap_err();
    assert_eq!(e.reason().as_str(), "InvalidMachineFacts");
    assert!(e.to_string().contains("network.gateway"), "{e}");
    let e = render(
        br#"{"ignition":{"version":"3.2.0","config":{"replace":{"source":"https://x/config"}}}}"#,
        &v4(),
    )
    .unwrap_err();
    assert_eq!(e.reason().as_str(), "InvalidIgnition");
    assert!(e.to_string().contains("$.ignition.config.replace"), "{e}");
    // A replace object without a source is harmless.
    assert!(
        render(
            br#"{"ignition":{"version":"3.2.0","config":{"replace":{"source":null}}}}"#,
            &v4()
        )
        .is_ok()
    );
}

#[test]
fn clean_paths() {
    assert_eq!(clean_path("/etc//hostname"), "/etc/hostname");
    assert_eq!(clean_path("/etc/./x/../hostname/"), "/etc/hostname");
    assert_eq!(clean_path("/../etc"), "/etc");
    assert_eq!(clean_path("/"), "/");
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z/.]{0,12}".prop_map(Value::from),
        prop::sample::select(vec![
            "3.0.0",
            "3.2.0",
            "3.6.0",
            "2.2.0",
            "/etc/hostname",
            "gzip",
            "data:,x"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "ignition",
                    "version",
                    "storage",
                    "files",
                    "links",
                    "directories",
                    "path",
                    "mode",
                    "contents",
                    "source",
                    "compression",
                    "overwrite",
                    "config",
                    "merge",
                    "replace",
                    "systemd",
                    "units",
                    "name",
                    "x",
                ])
                .prop_map(str::to_owned),
                inner,
                0..5,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn check_outcome(input: &[u8]) -> Result<(), TestCaseError> {
    match render(input, &v4()) {
        Ok(r) => {
            let (cfg, _) = Config::parse_slice(&r.json).map_err(|e| TestCaseError::fail(e.to_string()))?;
            drop(cfg);
            let v: Value = serde_json::from_slice(&r.json).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(entries(&v, "files", HOSTNAME_PATH).len(), 1);
        }
        Err(e) => prop_assert!(!e.to_string().is_empty() && !e.reason().as_str().is_empty()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_in_valid_config_or_error_out(mut doc in arb_json(), version in prop::sample::select(SUPPORTED_VERSIONS.to_vec()), pin in any::<bool>()) {
        if pin && let Some(obj) = doc.as_object_mut() {
            obj.insert("ignition".into(), json!({"version": version}));
        }
        check_outcome(&serde_json::to_vec(&doc).unwrap())?;
    }

    #[test]
    fn arbitrary_bytes_in_valid_config_or_error_out(data in prop::collection::vec(any::<u8>(), 0..256)) {
        check_outcome(&data)?;
    }
}

#[test]
fn every_interface_gets_its_own_keyfile() {
    let mut f = v4();
    let mut second = f.network.clone();
    second.interface_name = "enp2s0".into();
    second.addresses = vec![];
    second.gateway = None;
    second.nameservers = vec![];
    second.dhcp = true;
    f.additional_networks.push(second);
    let (_, v) = rendered(r#"{"ignition":{"version":"3.4.0"}}"#, &f);
    assert_eq!(
        keyfile_of(&v, "enp1s0").get("ipv4", "address1"),
        Some("192.168.122.50/24,192.168.122.1")
    );
    let dhcp = keyfile_of(&v, "enp2s0");
    assert_eq!(dhcp.get("ipv4", "method"), Some("auto"));
    assert_eq!(dhcp.get("connection", "interface-name"), Some("enp2s0"));
    assert_eq!(entries(&v, "files", "/etc/hostname").len(), 1);

    let mut dup = f.clone();
    dup.additional_networks[0].interface_name = "enp1s0".into();
    let e = render(br#"{"ignition":{"version":"3.4.0"}}"#, &dup).unwrap_err();
    assert!(e.to_string().contains("networks[1].interfaceName"), "{e}");
}
