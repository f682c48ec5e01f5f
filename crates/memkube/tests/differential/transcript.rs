//! What a scenario saw, step by step, with the values that legitimately differ between two
//! servers (uids, timestamps, concrete resourceVersions, generated name suffixes) replaced by
//! placeholders; and the comparison of two transcripts against the documented differences.

use super::side::{Reply, Side};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The normalised answers of one side, keyed by step name (a JSON pointer's first segment).
#[derive(Debug, Default)]
pub struct Transcript {
    steps: Map<String, Value>,
    /// resourceVersions seen so far, so that an answer can say "rv#3" (the third distinct
    /// resourceVersion this scenario saw) instead of a number that differs between servers.
    rvs: BTreeMap<String, usize>,
}

impl Transcript {
    /// Record `value` under `step`; step names are unique within a scenario.
    pub fn record(&mut self, step: &str, value: Value) {
        assert!(
            !step.contains(['/', '~']),
            "step names are JSON pointer segments: {step}"
        );
        let value = self.normalise(value);
        assert!(
            self.steps.insert(step.into(), value).is_none(),
            "step {step} recorded twice"
        );
    }

    /// Record a reply: its code, and either the error `Status` (reason, message, details) or
    /// the returned object, normalised.
    pub fn reply(&mut self, step: &str, r: &Reply) {
        self.record(step, reply_value(r));
    }

    /// A stable label for a resourceVersion: `rv#N`, N counting distinct versions in the
    /// order this transcript first met them. Equal labels on both sides mean the same
    /// sequence of "changed / unchanged".
    pub fn rv(&mut self, rv: &str) -> String {
        if rv.is_empty() {
            return String::new();
        }
        let n = self.rvs.len() + 1;
        format!("rv#{}", self.rvs.entry(rv.to_string()).or_insert(n))
    }

    fn normalise(&mut self, mut v: Value) -> Value {
        self.walk(&mut v, "");
        v
    }

    fn walk(&mut self, v: &mut Value, key: &str) {
        match v {
            Value::Object(m) => {
                for (k, child) in m.iter_mut() {
                    self.walk(child, k);
                }
                if let Some(Value::String(gn)) = m.get("generateName").cloned()
                    && let Some(Value::String(name)) = m.get_mut("name")
                    && name.starts_with(&gn)
                {
                    *name = format!("{gn}<suffix>");
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|c| self.walk(c, key)),
            Value::String(s) => match key {
                "uid" if !s.is_empty() => *s = "<uid>".into(),
                "creationTimestamp" | "deletionTimestamp" | "time" | "lastTransitionTime" | "lastUpdateTime" => {
                    *s = "<time>".into()
                }
                "resourceVersion" => *s = self.rv(&s.clone()),
                "certificate" if !s.is_empty() => *s = "<certificate>".into(),
                "message" | "continue" => *s = scrub(s),
                _ => {}
            },
            _ => {}
        }
    }

    /// This transcript as one JSON object.
    pub fn into_value(self) -> Value {
        Value::Object(self.steps)
    }
}

/// Replace uids, timestamps and resourceVersions inside free text (precondition and conflict
/// messages name them; resourceVersions appear in parentheses).
fn scrub(s: &str) -> String {
    let uuid = regex::Regex::new("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap();
    let time = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ").unwrap();
    let rv = regex::Regex::new(r"\(\d+\)").unwrap();
    let s = uuid.replace_all(s, "<uid>");
    let s = time.replace_all(&s, "<time>");
    rv.replace_all(&s, "(<n>)").into_owned()
}

/// The parts of a reply worth comparing.
pub fn reply_value(r: &Reply) -> Value {
    if r.body.get("kind") == Some(&json!("Status")) {
        let mut v = json!({"code": r.code, "status": r.body["status"], "reason": r.body["reason"], "message": r.body["message"]});
        if let Some(d) = r.body.get("details") {
            v["details"] = d.clone();
        }
        return v;
    }
    let mut v = json!({"code": r.code, "object": r.body});
    if !r.warnings.is_empty() {
        v["warnings"] = json!(r.warnings);
    }
    v
}

/// A difference between memkube and the genuine server that memkube's crate docs list as a
/// simplification: at `pointer` memkube answers `memkube` and the genuine server `genuine`
/// (None: absent). The comparison asserts both, so it fails if either side changes.
pub struct Known {
    pub pointer: String,
    pub memkube: Option<Value>,
    pub genuine: Option<Value>,
}

/// `Known` with both values present.
pub fn known(pointer: impl Into<String>, memkube: Value, genuine: Value) -> Known {
    Known {
        pointer: pointer.into(),
        memkube: Some(memkube),
        genuine: Some(genuine),
    }
}

/// `Known` for a place only the genuine server's answer has.
pub fn only_genuine(pointer: impl Into<String>, genuine: Value) -> Known {
    Known {
        pointer: pointer.into(),
        memkube: None,
        genuine: Some(genuine),
    }
}

/// `Known` for a place only memkube's answer has.
pub fn only_memkube(pointer: impl Into<String>, memkube: Value) -> Known {
    Known {
        pointer: pointer.into(),
        memkube: Some(memkube),
        genuine: None,
    }
}

/// Run `scenario` on a fresh memkube and on the genuine server (each with a fresh namespace
/// of the same name), then compare.
pub async fn differential<F, Fut>(test: &str, scenario: F, documented: &[Known])
where
    F: Fn(Side) -> Fut,
    Fut: Future<Output = Transcript>,
{
    let ns = format!("{test}-{}", run_id());
    let genuine = Side::genuine(&ns).await;
    let memkube = Side::memkube(&ns).await;
    let m = scenario(memkube).await.into_value();
    let g = scenario(genuine.clone()).await.into_value();
    let _ = genuine.delete(&format!("/api/v1/namespaces/{ns}"), &json!({})).await;
    compare(&m, &g, documented);
}

/// One suffix per test process, the same on both sides.
fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        format!("{:x}", t % 0xfffff)
    })
}

/// Assert every documented difference on both sides, blank those places, and require the
/// rest to be equal; a failure lists every differing place with both values.
pub fn compare(memkube: &Value, genuine: &Value, documented: &[Known]) {
    let (mut m, mut g) = (memkube.clone(), genuine.clone());
    let mut wrong = vec![];
    for k in documented {
        let (mv, gv) = (m.pointer(&k.pointer).cloned(), g.pointer(&k.pointer).cloned());
        if mv != k.memkube || gv != k.genuine {
            wrong.push(format!(
                "  {}: documented memkube {} / genuine {}, now memkube {} / genuine {}",
                k.pointer,
                show(&k.memkube),
                show(&k.genuine),
                show(&mv),
                show(&gv)
            ));
        }
        blank(&mut m, &k.pointer);
        blank(&mut g, &k.pointer);
    }
    let mut diffs = vec![];
    diff(&m, &g, String::new(), &mut diffs);
    let undocumented: Vec<String> = diffs
        .iter()
        .map(|(p, a, b)| format!("  {p}: memkube {} / genuine {}", show(a), show(b)))
        .collect();
    assert!(
        wrong.is_empty() && undocumented.is_empty(),
        "memkube and the genuine kube-apiserver disagree.\nDocumented differences that no longer hold:\n{}\nUndocumented differences:\n{}\n\nmemkube transcript:\n{}\n\ngenuine transcript:\n{}",
        wrong.join("\n"),
        undocumented.join("\n"),
        serde_json::to_string_pretty(memkube).unwrap(),
        serde_json::to_string_pretty(genuine).unwrap(),
    );
}

fn show(v: &Option<Value>) -> String {
    v.as_ref().map_or("<absent>".into(), Value::to_string)
}

fn blank(v: &mut Value, pointer: &str) {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    let last = last.replace("~1", "/").replace("~0", "~");
    match v.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.remove(&last);
        }
        Some(Value::Array(a)) => {
            if let Ok(i) = last.parse::<usize>()
                && i < a.len()
            {
                a[i] = json!("<documented>");
            }
        }
        _ => {}
    }
}

fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// Every leaf place where `a` and `b` differ.
fn diff(a: &Value, b: &Value, at: String, out: &mut Vec<(String, Option<Value>, Option<Value>)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{at}/{}", escape(k));
                match (x.get(k), y.get(k)) {
                    (Some(l), Some(r)) => diff(l, r, p, out),
                    (l, r) => out.push((p, l.cloned(), r.cloned())),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                diff(l, r, format!("{at}/{i}"), out);
            }
        }
        _ if a == b => {}
        _ => out.push((at, Some(a.clone()), Some(b.clone()))),
    }
}
