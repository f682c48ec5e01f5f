//! Fidelity tests driving memkube over TCP with the real `kubectl` (/usr/bin/kubectl).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use memkube::Server;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

const DEADLINE: Duration = Duration::from_secs(20);

struct Env {
    _server: Server,
    dir: tempfile::TempDir,
}

impl Env {
    async fn new() -> Env {
        let server = Server::new();
        let addr = server.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kubeconfig"), memkube::kubeconfig_yaml(addr)).unwrap();
        Env { _server: server, dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, body: &str) -> String {
        std::fs::write(self.path(name), body).unwrap();
        self.path(name).display().to_string()
    }

    fn cmd(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("kubectl");
        c.env("KUBECONFIG", self.path("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.path("cache"))
            .arg("--request-timeout=10s")
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// Run kubectl; returns (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::time::timeout(DEADLINE, self.cmd(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }

    async fn fail(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(!ok, "kubectl {args:?} unexpectedly succeeded: {out}");
        err
    }
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            x-kubernetes-validations:
            - rule: self.size <= 10
              message: size must be at most 10
            properties:
              size: {type: integer}
              color: {type: string, default: blue}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

const W1: &str = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n";

async fn with_crd() -> Env {
    let env = Env::new().await;
    let crd = env.write("crd.yaml", CRD);
    env.ok(&["apply", "-f", &crd]).await;
    let out = env
        .ok(&[
            "wait",
            "--for",
            "condition=established",
            "crd/widgets.example.com",
            "--timeout=10s",
        ])
        .await;
    assert!(out.contains("condition met"), "{out}");
    env
}

#[tokio::test]
async fn apply_get_patch_label_delete() {
    let env = with_crd().await;
    let w = env.write("w1.yaml", W1);
    assert!(
        env.ok(&["apply", "-f", &w])
            .await
            .contains("widget.example.com/w1 created")
    );
    assert!(env.ok(&["apply", "-f", &w]).await.contains("unchanged"));

    let table = env.ok(&["get", "widgets"]).await;
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SIZE", "COLOR", "AGE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["w1", "3", "blue"], "schema default applied");

    let yaml = env.ok(&["get", "wd", "w1", "-o", "yaml"]).await;
    assert!(
        yaml.contains("kind: Widget") && yaml.contains("generation: 1") && yaml.contains("uid:"),
        "{yaml}"
    );

    env.ok(&["patch", "widget", "w1", "--type=merge", "-p", r#"{"spec":{"size":5}}"#])
        .await;
    env.ok(&[
        "patch",
        "widget",
        "w1",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/color","value":"red"}]"#,
    ])
    .await;
    let got = env
        .ok(&[
            "get",
            "widget",
            "w1",
            "-o",
            "jsonpath={.spec.size} {.spec.color} {.metadata.generation}",
        ])
        .await;
    assert_eq!(got, "5 red 3");

    env.ok(&["label", "widget", "w1", "tier=web"]).await;
    assert!(
        env.ok(&["get", "widgets", "-l", "tier=web", "-o", "name"])
            .await
            .contains("widget.example.com/w1")
    );
    assert!(
        env.ok(&["get", "widgets", "-l", "tier!=web", "-o", "name"])
            .await
            .trim()
            .is_empty()
    );

    // kubectl patch owns .spec.size now: server-side apply of another value conflicts
    let err = env.fail(&["apply", "--server-side", "-f", &w]).await;
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl-patch" using example.com/v1: .spec.size"#),
        "{err}"
    );
    env.ok(&["apply", "--server-side", "--force-conflicts", "-f", &w]).await;
    assert!(
        env.ok(&["get", "widget", "w1", "-o", "yaml", "--show-managed-fields"])
            .await
            .contains("manager: kubectl")
    );

    // wait --for=delete while another command deletes
    let waiter = env
        .cmd(&["wait", "--for=delete", "widget/w1", "--timeout=15s"])
        .output();
    let (wait_out, del) = tokio::join!(waiter, async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        env.ok(&["delete", "widget", "w1"]).await
    });
    assert!(del.contains("deleted"));
    assert!(wait_out.unwrap().status.success());
    let err = env.fail(&["get", "widget", "w1"]).await;
    assert!(
        err.contains(r#"Error from server (NotFound): widgets.example.com "w1" not found"#),
        "{err}"
    );

    // core kinds through apply (kubectl create sends protobuf, so apply is the way)
    let cm = env.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b\n",
    );
    env.ok(&["apply", "-f", &cm]).await;
    let cms = env.ok(&["get", "cm"]).await;
    assert!(cms.starts_with("NAME") && cms.contains("DATA"), "{cms}");
    assert!(env.ok(&["get", "ns"]).await.contains("kube-system"));
}

#[tokio::test]
async fn get_watch_streams_changes() {
    let env = with_crd().await;
    let w = env.write("w1.yaml", W1);
    env.ok(&["apply", "-f", &w]).await;
    let mut child = env
        .cmd(&["get", "widgets", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            s2.lock().unwrap().push_str(&l);
            s2.lock().unwrap().push('\n');
        }
    });
    let wait_for = |needle: &'static str| {
        let seen = seen.clone();
        async move {
            let end = tokio::time::Instant::now() + DEADLINE;
            while !seen.lock().unwrap().contains(needle) {
                assert!(
                    tokio::time::Instant::now() < end,
                    "watch output lacks {needle:?}: {}",
                    seen.lock().unwrap()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_for("ADDED").await;
    env.ok(&["patch", "widget", "w1", "--type=merge", "-p", r#"{"spec":{"size":7}}"#])
        .await;
    wait_for("MODIFIED").await;
    let out = seen.lock().unwrap().clone();
    assert!(
        out.lines().any(|l| l.contains("MODIFIED") && l.contains(" 7 ")),
        "{out}"
    );
    env.ok(&["delete", "widget", "w1"]).await;
    wait_for("DELETED").await;
    child.kill().await.unwrap();
}

#[tokio::test]
async fn events_from_a_recorder_show_in_get_and_describe() {
    use kube::Resource;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let env = with_crd().await;
    let w = env.write("w1.yaml", W1);
    env.ok(&["apply", "-f", &w]).await;
    let obj = env
        ._server
        .get_object("example.com/v1", "Widget", "default", "w1")
        .unwrap();
    let dynobj: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
    let rec = Recorder::new(
        env._server.client(),
        Reporter {
            controller: "widget-ctrl".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "Frobbed".into(),
        note: Some("frobbed the widget".into()),
        action: "Frob".into(),
        secondary: None,
    };
    let oref = dynobj.object_ref(&kube::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    });
    rec.publish(&ev, &oref).await.unwrap();
    rec.publish(&ev, &oref).await.unwrap();

    let out = env.ok(&["get", "events"]).await;
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], "{out}");
    let row = lines.next().unwrap();
    assert!(
        row.contains("Warning")
            && row.contains("Frobbed")
            && row.contains("widget/w1")
            && row.contains("frobbed the widget"),
        "{out}"
    );
    let wide = env.ok(&["get", "events", "-o", "wide"]).await;
    assert!(wide.contains("widget-ctrl"), "{wide}");

    let desc = env.ok(&["describe", "widget", "w1"]).await;
    let events = desc.split("Events:").nth(1).unwrap_or_else(|| panic!("{desc}"));
    assert!(
        events.contains("Warning")
            && events.contains("Frobbed")
            && events.contains("widget-ctrl")
            && events.contains("frobbed the widget"),
        "{desc}"
    );
    assert!(events.contains("x2 over"), "series count shown: {desc}");
}

const CLUSTERS_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: machines.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: machines, singular: machine, kind: Machine}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - name: Cluster
      type: string
      jsonPath: .metadata.labels['cluster\.x-k8s\.io/cluster-name']
    - {name: Role, type: string, jsonPath: .metadata.labels.role}
    - {name: Expires, type: date, jsonPath: .spec.expires}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              expires: {type: string, format: date-time}
              size: {type: integer}
              replicas: {type: integer}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

#[tokio::test]
async fn printer_columns_quoted_keys_and_future_dates() {
    let env = Env::new().await;
    let crd = env.write("crd.yaml", CLUSTERS_CRD);
    env.ok(&["apply", "-f", &crd]).await;
    env.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/machines.example.com",
        "--timeout=10s",
    ])
    .await;
    let m = env.write(
        "m.yaml",
        "apiVersion: example.com/v1\nkind: Machine\nmetadata:\n  name: m1\n  labels:\n    cluster.x-k8s.io/cluster-name: c1\n    role: worker\nspec:\n  expires: \"2999-01-01T00:00:00Z\"\n  size: 1\n",
    );
    env.ok(&["apply", "-f", &m]).await;
    let out = env.ok(&["get", "machines"]).await;
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "CLUSTER", "ROLE", "EXPIRES"], "{out}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row, ["m1", "c1", "worker", "<invalid>"], "{out}");

    let mut child = env
        .cmd(&["get", "machines", "-w", "--output-watch-events"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            let mut s = s2.lock().unwrap();
            s.push_str(&l);
            s.push('\n');
        }
    });
    let wait_for = |pred: fn(&str) -> bool| {
        let seen = seen.clone();
        async move {
            let end = tokio::time::Instant::now() + DEADLINE;
            while !pred(&seen.lock().unwrap()) {
                assert!(
                    tokio::time::Instant::now() < end,
                    "watch output: {}",
                    seen.lock().unwrap()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    wait_for(|s| s.contains("ADDED")).await;
    env.ok(&["label", "--overwrite", "machine", "m1", "role=control-plane"])
        .await;
    wait_for(|s| {
        s.lines()
            .any(|l| l.contains("MODIFIED") && l.contains("control-plane") && l.contains("<invalid>"))
    })
    .await;
    env.ok(&["patch", "machine", "m1", "--type=merge", "-p", r#"{"spec":{"size":2}}"#])
        .await;
    wait_for(|s| s.matches("MODIFIED").count() >= 2).await;
    child.kill().await.unwrap();

    // `kubectl scale` goes through the scale subresource
    env.ok(&["scale", "machine", "m1", "--replicas=4"]).await;
    let got = env
        .ok(&["get", "machine", "m1", "-o", "jsonpath={.spec.replicas}"])
        .await;
    assert_eq!(got, "4");
    let d = env.write(
        "d.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  selector:\n    matchLabels: {app: d}\n  template:\n    metadata:\n      labels: {app: d}\n    spec:\n      containers: [{name: c, image: i}]\n",
    );
    env.ok(&["apply", "-f", &d]).await;
    env.ok(&["scale", "deployment", "d", "--replicas=3"]).await;
    let got = env.ok(&["get", "deploy", "d", "-o", "jsonpath={.spec.replicas}"]).await;
    assert_eq!(got, "3");
}

#[tokio::test]
async fn bad_input_is_reported_like_an_apiserver() {
    let env = with_crd().await;

    // malformed YAML body sent raw
    let bad = env.write("bad.yaml", "kind: [unclosed\n  : x");
    let err = env
        .fail(&["create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", &bad])
        .await;
    assert!(err.contains("Error from server (BadRequest)"), "{err}");

    // unknown kind
    let unknown = env.write(
        "u.yaml",
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\n",
    );
    let err = env.fail(&["apply", "-f", &unknown]).await;
    assert!(
        err.contains(r#"no matches for kind "Gadget" in version "example.com/v1""#),
        "{err}"
    );

    // invalid CEL rule rejects the CRD with 422
    let bad_crd = CRD
        .replace("widgets", "gizmos")
        .replace("Widget", "Gizmo")
        .replace("widget", "gizmo")
        .replace("wd]", "gz]")
        .replace("self.size <= 10", "self.size <=");
    let f = env.write("badcrd.yaml", &bad_crd);
    let err = env.fail(&["apply", "-f", &f]).await;
    assert!(
        err.contains(r#"The CustomResourceDefinition "gizmos.example.com" is invalid"#),
        "{err}"
    );
    assert!(err.contains("x-kubernetes-validations[0].rule"), "{err}");

    // CEL rule evaluated on create
    let big = env.write("big.yaml", &W1.replace("size: 3", "size: 11"));
    let err = env.fail(&["apply", "-f", &big]).await;
    assert!(
        err.contains(r#"The Widget "w1" is invalid"#) && err.contains("size must be at most 10"),
        "{err}"
    );
    // required field missing
    let noreq = env.write(
        "noreq.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  color: x\n",
    );
    let err = env.fail(&["apply", "-f", &noreq]).await;
    assert!(err.contains("spec.size: Required value"), "{err}");

    // unknown fields: kubectl asks for fieldValidation=Strict
    let typo = env.write("typo.yaml", &W1.replace("size: 3", "size: 3\n  sise: 4"));
    let err = env.fail(&["apply", "-f", &typo]).await;
    assert!(
        err.contains(
            r#"Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.sise""#
        ),
        "{err}"
    );
    let (ok, _, warn) = env.run(&["apply", "--validate=warn", "-f", &typo]).await;
    assert!(ok && warn.contains(r#"unknown field "spec.sise""#), "{warn}");
    env.ok(&["delete", "widget", "w1"]).await;

    // stale resourceVersion on replace
    let w = env.write("w1.yaml", W1);
    env.ok(&["apply", "-f", &w]).await;
    let old = env.ok(&["get", "widget", "w1", "-o", "yaml"]).await;
    env.ok(&["patch", "widget", "w1", "--type=merge", "-p", r#"{"spec":{"size":4}}"#])
        .await;
    let stale = env.write("stale.yaml", &old);
    let err = env.fail(&["replace", "-f", &stale]).await;
    assert!(
        err.contains(r#"Operation cannot be fulfilled on widgets.example.com "w1": the object has been modified; please apply your changes to the latest version and try again"#),
        "{err}"
    );
    assert!(Path::new(&stale).exists());
}

#[tokio::test]
async fn binary_serves_kubectl_and_exits_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kc");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_memkube"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kc)
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let end = tokio::time::Instant::now() + DEADLINE;
    while !kc.exists() {
        assert!(tokio::time::Instant::now() < end, "no kubeconfig written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = tokio::process::Command::new("kubectl")
        .env("KUBECONFIG", &kc)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(["get", "ns", "-o", "name"])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("namespace/default"));
    let pid = child.id().unwrap().to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(DEADLINE, child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exit status {status:?}");
}
