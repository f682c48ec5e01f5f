use super::*;
use crate::ignition::dataurl::decode;
use ignition_config::Config;
use proptest::prelude::*;

const OS_META: &str = "metadata:\n  name: 99-worker-x\n  labels:\n    machineconfiguration.openshift.io/role: worker\n";

fn ok(yaml: &str) -> (Translated, Value) {
    let t = translate(yaml.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let (_, warnings) = Config::parse_slice(&t.json).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    (t.clone(), serde_json::from_slice(&t.json).unwrap())
}

fn unsupported_field(yaml: &str) -> String {
    match translate(yaml.as_bytes()) {
        Err(Error::UnsupportedButaneField { field }) => field,
        other => panic!("{other:?}"),
    }
}

fn invalid_at(yaml: &str) -> String {
    match translate(yaml.as_bytes()) {
        Err(e @ Error::InvalidButane { .. }) => {
            assert_eq!(e.reason().as_str(), "InvalidButane");
            let Error::InvalidButane { location, .. } = e else {
                unreachable!()
            };
            location
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn version_table() {
    for (variant, version, ign) in BUTANE_VERSIONS {
        let meta = if variant == "openshift" { OS_META } else { "" };
        let (t, v) = ok(&format!("variant: {variant}\nversion: {version}\n{meta}"));
        assert_eq!(t.version, ign);
        assert_eq!(v, json!({"ignition": {"version": ign}}));
    }
    assert_eq!(ignition_version_for("fcos", "1.5.0"), Some("3.4.0"));
    assert_eq!(ignition_version_for("fcos", "1.6.0"), Some("3.5.0"));
    assert_eq!(ignition_version_for("openshift", "4.16.0"), Some("3.4.0"));
    for (yaml, variant, version) in [
        ("variant: fcos\nversion: 1.8.0\n", "fcos", "1.8.0"),
        ("variant: flatcar\nversion: 1.0.0\n", "flatcar", "1.0.0"),
        (
            "variant: fcos\nversion: 1.6.0-experimental\n",
            "fcos",
            "1.6.0-experimental",
        ),
        ("variant: \"ssh-ed25519 AAAA\"\nversion: \"hunter2 x\"\n", "?", "?"),
    ] {
        let e = translate(yaml.as_bytes()).unwrap_err();
        assert_eq!(
            e,
            Error::UnsupportedButaneVersion {
                variant: variant.into(),
                version: version.into()
            }
        );
        assert_eq!(e.reason().as_str(), "UnsupportedButaneVersion");
    }
    assert_eq!(invalid_at("version: 1.5.0\n"), "variant");
    assert_eq!(invalid_at("variant: fcos\n"), "version");
    assert_eq!(
        invalid_at("variant: fcos\nversion: 1.5\n".replace("1.5", "[1]").as_str()),
        "version"
    );
}

#[test]
fn files_directories_links() {
    let yaml = r#"
variant: fcos
version: 1.5.0
storage:
  files:
    - path: /etc/motd
      mode: 0644
      overwrite: true
      user: {name: core}
      group: {id: 1000}
      contents:
        inline: |
          hello
    - path: /opt/fetched
      mode: 0o755
      contents:
        source: https://example.com/x.gz
        compression: gzip
        verification: {hash: sha512-abcdef}
      append:
        - inline: "tail"
    - path: /etc/empty
      mode: 420
  directories:
    - path: /var/lib/app
      mode: 0700
      overwrite: yes
  links:
    - path: /etc/localtime
      target: ../usr/share/zoneinfo/UTC
      hard: false
"#;
    let (t, v) = ok(yaml);
    assert_eq!(t.version, "3.4.0");
    let files = v["storage"]["files"].as_array().unwrap();
    assert_eq!(files[0]["path"], "/etc/motd");
    assert_eq!(files[0]["mode"], 420);
    assert_eq!(files[0]["overwrite"], true);
    assert_eq!(files[0]["user"], json!({"name": "core"}));
    assert_eq!(files[0]["group"], json!({"id": 1000}));
    assert_eq!(
        decode(files[0]["contents"]["source"].as_str().unwrap(), None).unwrap(),
        b"hello\n"
    );
    assert_eq!(files[1]["mode"], 493);
    assert_eq!(
        files[1]["contents"],
        json!({"source": "https://example.com/x.gz", "compression": "gzip", "verification": {"hash": "sha512-abcdef"}})
    );
    assert_eq!(
        decode(files[1]["append"][0]["source"].as_str().unwrap(), None).unwrap(),
        b"tail"
    );
    assert_eq!(files[2], json!({"path": "/etc/empty", "mode": 420}));
    assert_eq!(
        v["storage"]["directories"],
        json!([{"path": "/var/lib/app", "mode": 448, "overwrite": true}])
    );
    assert_eq!(
        v["storage"]["links"],
        json!([{"path": "/etc/localtime", "target": "../usr/share/zoneinfo/UTC", "hard": false}])
    );
}

#[test]
fn large_inline_is_gzipped_except_openshift_4_8() {
    let body = "line of config text\n".repeat(50);
    let indented: String = body.lines().map(|l| format!("          {l}\n")).collect();
    let storage = format!("storage:\n  files:\n    - path: /etc/big\n      contents:\n        inline: |\n{indented}");
    let (_, v) = ok(&format!("variant: fcos\nversion: 1.4.0\n{storage}"));
    let c = &v["storage"]["files"][0]["contents"];
    assert_eq!(c["compression"], "gzip");
    assert_eq!(
        decode(c["source"].as_str().unwrap(), Some("gzip")).unwrap(),
        body.as_bytes()
    );
    let (_, v) = ok(&format!("variant: openshift\nversion: 4.8.0\n{OS_META}{storage}"));
    let c = &v["storage"]["files"][0]["contents"];
    assert!(c.get("compression").is_none());
    assert_eq!(decode(c["source"].as_str().unwrap(), None).unwrap(), body.as_bytes());
    let f = unsupported_field(&format!(
        "variant: openshift\nversion: 4.9.0\n{OS_META}storage:\n  files:\n    - path: /a\n      contents: {{source: 'data:,x', compression: gzip}}\n"
    ));
    assert_eq!(f, "storage.files[0].contents.compression");
}

#[test]
fn units_and_dropins() {
    let yaml = r#"
variant: fcos
version: 1.0.0
systemd:
  units:
    - name: hello.service
      enabled: true
      contents: |
        [Service]
        ExecStart=/bin/true
        [Install]
        WantedBy=multi-user.target
    - name: kubelet.service
      dropins:
        - name: 20-x.conf
          contents: "[Service]\nEnvironment=A=b\n"
    - name: bad.service
      mask: true
"#;
    let (t, v) = ok(yaml);
    assert_eq!(t.version, "3.0.0");
    let units = v["systemd"]["units"].as_array().unwrap();
    assert_eq!(units[0]["enabled"], true);
    assert!(units[0]["contents"].as_str().unwrap().contains("ExecStart=/bin/true\n"));
    assert_eq!(
        units[1]["dropins"],
        json!([{"name": "20-x.conf", "contents": "[Service]\nEnvironment=A=b\n"}])
    );
    assert_eq!(units[2], json!({"name": "bad.service", "mask": true}));
}

#[test]
fn users_and_groups() {
    let yaml = r#"
variant: openshift
version: 4.16.0
metadata:
  name: 99-worker-ssh
  labels:
    machineconfiguration.openshift.io/role: worker
passwd:
  users:
    - name: core
      ssh_authorized_keys:
        - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA core@lab
      groups: [wheel, sudo]
      home_dir: /var/home/core
      shell: /bin/bash
      uid: 1000
      password_hash: "$y$j9T$x"
  groups:
    - name: ops
      gid: 4000
      system: false
"#;
    let (t, v) = ok(yaml);
    assert_eq!(t.version, "3.4.0");
    assert_eq!(
        v["passwd"]["users"][0],
        json!({
            "name": "core",
            "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA core@lab"],
            "groups": ["wheel", "sudo"],
            "homeDir": "/var/home/core",
            "shell": "/bin/bash",
            "uid": 1000,
            "passwordHash": "$y$j9T$x"
        })
    );
    assert_eq!(
        v["passwd"]["groups"],
        json!([{"name": "ops", "gid": 4000, "system": false}])
    );
}

#[test]
fn rejections_name_the_field() {
    let fcos = "variant: fcos\nversion: 1.5.0\n";
    for (body, field) in [
        (
            "storage:\n  filesystems:\n    - device: /dev/vdb\n",
            "storage.filesystems[0]",
        ),
        ("storage:\n  disks:\n    - device: /dev/vdb\n", "storage.disks[0]"),
        ("storage:\n  trees:\n    - local: x\n", "storage.trees[0]"),
        (
            "storage:\n  files:\n    - path: /a\n      contents: {local: x}\n",
            "storage.files[0].contents.local",
        ),
        (
            "storage:\n  files:\n    - path: /a\n      user: {uid: 1}\n",
            "storage.files[0].user.uid",
        ),
        (
            "systemd:\n  units:\n    - name: a\n      contents_local: a.service\n",
            "systemd.units[0].contents_local",
        ),
        (
            "passwd:\n  users:\n    - name: core\n      ssh_authorized_keys_local: [k]\n",
            "passwd.users[0].ssh_authorized_keys_local",
        ),
        (
            "passwd:\n  users:\n    - name: core\n      should_exist: false\n",
            "passwd.users[0].should_exist",
        ),
        ("ignition:\n  config:\n    merge: []\n", "ignition"),
        ("kernel_arguments:\n  should_exist: [quiet]\n", "kernel_arguments"),
        ("boot_device:\n  mirror: {}\n", "boot_device"),
        ("metadata:\n  name: x\n", "metadata"),
        ("extra: 1\n", "extra"),
    ] {
        assert_eq!(unsupported_field(&format!("{fcos}{body}")), field, "{body}");
    }
    let os = format!("variant: openshift\nversion: 4.14.0\n{OS_META}");
    assert_eq!(
        unsupported_field(&format!("{os}openshift:\n  kernel_type: realtime\n")),
        "openshift"
    );
    assert_eq!(
        unsupported_field(&format!("{os}storage:\n  luks:\n    - name: x\n")),
        "storage.luks[0]"
    );
    // Null and empty lists of unsupported sections mean nothing.
    ok(&format!("{fcos}storage:\n  filesystems: []\n  files:\n"));
    ok(&format!("{fcos}ignition:\n"));
}

#[test]
fn invalid_values_name_the_field() {
    let fcos = "variant: fcos\nversion: 1.5.0\n";
    for (body, location) in [
        ("storage:\n  files:\n    - mode: 0644\n", "storage.files[0].path"),
        ("storage:\n  files:\n    - path: etc/x\n", "storage.files[0].path"),
        (
            "storage:\n  files:\n    - path: /x\n      mode: 0999\n",
            "storage.files[0].mode",
        ),
        (
            "storage:\n  files:\n    - path: /x\n      mode: 70000\n",
            "storage.files[0].mode",
        ),
        (
            "storage:\n  files:\n    - path: /x\n      mode: -1\n",
            "storage.files[0].mode",
        ),
        (
            "storage:\n  files:\n    - path: /x\n      overwrite: maybe\n",
            "storage.files[0].overwrite",
        ),
        (
            "storage:\n  files:\n    - path: /x\n      contents: {inline: a, source: 'data:,b'}\n",
            "storage.files[0].contents",
        ),
        (
            "storage:\n  files:\n    - path: /x\n      contents: {inline: a, compression: gzip}\n",
            "storage.files[0].contents.compression",
        ),
        (
            "storage:\n  files:\n    - path: /x\n      contents: {source: 'data:,a', compression: xz}\n",
            "storage.files[0].contents.compression",
        ),
        (
            "storage:\n  files:\n    - path: /x\n      contents: {source: 'data:,a', verification: {hash: md5-1}}\n",
            "storage.files[0].contents.verification.hash",
        ),
        (
            "storage:\n  files:\n    - path: /x\n  links:\n    - path: /x/\n      target: /y\n",
            "storage.links[0].path",
        ),
        ("storage:\n  links:\n    - path: /x\n", "storage.links[0].target"),
        ("storage:\n  files: {path: /x}\n", "storage.files"),
        ("systemd:\n  units:\n    - enabled: true\n", "systemd.units[0].name"),
        (
            "systemd:\n  units:\n    - name: a\n    - name: a\n",
            "systemd.units[1].name",
        ),
        (
            "systemd:\n  units:\n    - name: a\n      dropins:\n        - contents: x\n",
            "systemd.units[0].dropins[0].name",
        ),
        (
            "passwd:\n  users:\n    - name: core\n      ssh_authorized_keys: [1]\n",
            "passwd.users[0].ssh_authorized_keys[0]",
        ),
        (
            "passwd:\n  users:\n    - name: core\n      uid: abc\n",
            "passwd.users[0].uid",
        ),
        ("passwd:\n  users:\n    - shell: /bin/sh\n", "passwd.users[0].name"),
        ("storage: [1]\n", "storage"),
    ] {
        assert_eq!(invalid_at(&format!("{fcos}{body}")), location, "{body}");
    }
    assert_eq!(invalid_at("- a\n- b\n"), "the document");
    assert_eq!(invalid_at("a: [\n"), "line 2 column 1");
    assert!(invalid_at("a: b\n---\nc: d\n").starts_with("line") || invalid_at("a: b\n---\nc: d\n") == "the document");
}

#[test]
fn openshift_rules() {
    let head = "variant: openshift\nversion: 4.14.0\n";
    assert_eq!(invalid_at(head), "metadata");
    assert_eq!(
        invalid_at(&format!("{head}metadata:\n  labels:\n    a: b\n")),
        "metadata.name"
    );
    assert_eq!(invalid_at(&format!("{head}metadata:\n  name: x\n")), "metadata.labels");
    assert_eq!(
        invalid_at(&format!("{head}metadata:\n  name: x\n  labels:\n    a: b\n")),
        "metadata.labels.machineconfiguration.openshift.io/role"
    );
    assert_eq!(
        invalid_at(&format!(
            "{head}{OS_META}storage:\n  files:\n    - path: /a\n      contents: {{source: 'https://x'}}\n"
        )),
        "storage.files[0].contents.source"
    );
    ok(&format!(
        "{head}{OS_META}storage:\n  files:\n    - path: /a\n      contents: {{source: 'data:,x'}}\n"
    ));
}

#[test]
fn errors_never_echo_values() {
    let secret = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKsecret";
    for yaml in [
        format!("variant: fcos\nversion: 1.5.0\npasswd:\n  users:\n    - name: core\n      uid: \"{secret}\"\n"),
        format!("variant: fcos\nversion: 1.5.0\nstorage:\n  files:\n    - path: /x\n      mode: \"{secret}\"\n"),
        format!("variant: fcos\nversion: \"{secret}\"\n"),
        format!("variant: fcos\nversion: 1.5.0\npasswd: [\"{secret}\"\n"),
    ] {
        let e = translate(yaml.as_bytes()).unwrap_err();
        assert!(!format!("{e} {e:?}").contains("AAAA"), "{e:?}");
    }
}

#[test]
fn too_large() {
    let yaml = format!(
        "variant: fcos\nversion: 1.5.0\n#{}\n",
        "x".repeat(crate::ignition::MAX_CONFIG_BYTES)
    );
    assert_eq!(translate(yaml.as_bytes()).unwrap_err().reason().as_str(), "TooLarge");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_yaml_never_panics(body in "(?s)[a-z_:\\[\\]{}\\- \n/0-9.'\"]{0,200}") {
        let doc = format!("variant: fcos\nversion: 1.5.0\n{body}");
        if let Ok(t) = translate(doc.as_bytes()) {
            prop_assert!(Config::parse_slice(&t.json).is_ok());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = translate(&data);
    }
}
