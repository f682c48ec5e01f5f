//! `serviceaccounts/token`: the TokenRequest API. Mints a random opaque token (not a JWT:
//! nothing here authenticates requests, so no one ever verifies it) with the expiry the real
//! server would report, after the real server's checks.

use crate::meta;
use crate::ops::State;
use crate::registry::ResourceInfo;
use crate::status::{ApiError, ApiResult};
use serde_json::{Value, json};

/// Lifetime of a token whose request names none (the API server's default).
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime the API server accepts.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest lifetime the API server accepts (2^32 s).
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// Audience of a token whose request names none: the in-cluster API server URL.
const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc";

fn invalid(name: &str, field: &str, value: &Value, why: &str) -> ApiError {
    ApiError::invalid(
        "TokenRequest",
        "authentication.k8s.io",
        name,
        &[(
            field.into(),
            "FieldValueInvalid".into(),
            format!("{field}: Invalid value: {value}: {why}"),
        )],
    )
}

impl State {
    /// POST serviceaccounts/{name}/token.
    pub fn token_request(&self, sas: &ResourceInfo, ns: &str, name: &str, body: &Value) -> ApiResult<Value> {
        if self.store.get(&sas.store_key(), ns, name).is_none() {
            return Err(ApiError::not_found("serviceaccounts", "", name));
        }
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let seconds = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
        };
        if seconds < MIN_EXPIRATION_SECONDS {
            return Err(invalid(
                name,
                "spec.expirationSeconds",
                &json!(seconds),
                "may not specify a duration less than 10 minutes",
            ));
        }
        if seconds > MAX_EXPIRATION_SECONDS {
            return Err(invalid(
                name,
                "spec.expirationSeconds",
                &json!(seconds),
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
        if let Some(bound) = spec.get("boundObjectRef").filter(|b| !b.is_null()) {
            self.check_bound_object(ns, name, bound)?;
        }
        let audiences = match spec.get("audiences").and_then(Value::as_array) {
            Some(a) if !a.is_empty() => Value::Array(a.clone()),
            _ => json!([DEFAULT_AUDIENCE]),
        };
        let expires = chrono::Utc::now() + chrono::Duration::seconds(seconds);
        let token = format!(
            "memkube.{:016x}{:016x}{:016x}",
            meta::random_u64(),
            meta::random_u64(),
            meta::random_u64()
        );
        let mut spec = spec;
        spec["audiences"] = audiences;
        spec["expirationSeconds"] = json!(seconds);
        Ok(json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
            "spec": spec,
            "status": {
                "token": token,
                "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            },
        }))
    }

    /// A token bound to an object needs that object (a Pod, Secret or Node) to exist, with the
    /// uid the request names.
    fn check_bound_object(&self, ns: &str, name: &str, bound: &Value) -> ApiResult<()> {
        let kind = bound.get("kind").and_then(Value::as_str).unwrap_or_default();
        let target = bound.get("name").and_then(Value::as_str).unwrap_or_default();
        let (key, key_ns, plural) = match kind {
            "Pod" => ("/pods", ns, "pods"),
            "Secret" => ("/secrets", ns, "secrets"),
            "Node" => ("/nodes", "", "nodes"),
            _ => {
                return Err(invalid(
                    name,
                    "spec.boundObjectRef.kind",
                    &json!(kind),
                    "supported values: \"Pod\", \"Secret\", \"Node\"",
                ));
            }
        };
        let object = self
            .store
            .get(key, key_ns, target)
            .ok_or_else(|| ApiError::not_found(plural, "", target))?;
        let uid = bound.get("uid").and_then(Value::as_str).unwrap_or_default();
        if !uid.is_empty() && uid != meta::uid(object) {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        Ok(())
    }
}
