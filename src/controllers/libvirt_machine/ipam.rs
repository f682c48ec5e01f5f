//! Addresses from IPAM pools (`networks[].addressesFromPools`). The machine files one
//! `IPAddressClaim` per interface and pool, named `<machine>-<interface>-<pool>` by position and
//! owned by the machine, and waits until every claim is bound to an `IPAddress`. Provisioning then
//! records the addresses in `status.claimedAddresses`, the keyfiles and `status.addresses` are
//! built from them, and deletion releases the claims once the VM is gone.

use std::{borrow::Cow, time::Duration};

use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, DynamicObject, ObjectMeta, PostParams},
};

use super::Error;
use crate::{
    api::{
        CLUSTER_NAME_LABEL,
        ipam::{self, ClaimState},
        libvirt_machine::{ClaimedAddress, IpPoolReference, LibvirtMachine, LibvirtMachineSpec},
    },
    reconcile::{ApiError, Context, error::get_opt},
};

/// How often a machine looks at claims that have no address yet. Claims are not watched: the
/// IPAM CRDs are optional in a management cluster, and a pending claim is short-lived.
pub(super) const POLL: Duration = Duration::from_secs(2);

/// The longest object name Kubernetes takes.
const MAX_NAME: usize = 253;

/// One claim the machine needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ClaimPlan {
    /// The claim's name.
    pub name: String,
    /// The guest interface the address configures.
    pub interface_name: String,
    /// The pool it claims from.
    pub pool: IpPoolReference,
}

/// Where the machine's claims stand.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ipam {
    /// No interface claims from a pool.
    Unused,
    /// These claims do not exist yet.
    Missing(Vec<ClaimPlan>),
    /// Some claim has no address yet; the message says which and why.
    Pending(String),
    /// A claim cannot be used as it is; the message says why.
    Invalid(String),
    /// Every claim is bound.
    Bound(Vec<ClaimedAddress>),
}

/// The claims `machine` needs, in interface and pool order.
pub(super) fn plans(machine: &LibvirtMachine) -> Vec<ClaimPlan> {
    let name = machine.name_any();
    machine
        .spec
        .interfaces()
        .into_iter()
        .enumerate()
        .flat_map(|(i, n)| {
            let name = &name;
            n.addresses_from_pools
                .iter()
                .enumerate()
                .map(move |(j, pool)| ClaimPlan {
                    name: format!("{name}-{i}-{j}"),
                    interface_name: n.interface_name.clone(),
                    pool: pool.clone(),
                })
        })
        .collect()
}

fn claims_api(machine: &LibvirtMachine, ctx: &Context) -> Api<DynamicObject> {
    Api::namespaced_with(
        ctx.client.clone(),
        &machine.namespace().unwrap_or_default(),
        &ipam::claim_resource(ctx.capi),
    )
}

/// Read the machine's claims and the addresses they are bound to.
pub(super) async fn observe(machine: &LibvirtMachine, ctx: &Context) -> Result<Ipam, Error> {
    let plans = plans(machine);
    if plans.is_empty() {
        return Ok(Ipam::Unused);
    }
    if let Some(long) = plans.iter().find(|p| p.name.len() > MAX_NAME) {
        return Ok(Ipam::Invalid(format!(
            "the IPAddressClaim name {:?} would be longer than {MAX_NAME} characters; shorten the LibvirtMachine's name",
            long.name
        )));
    }
    let claims = claims_api(machine, ctx);
    let addresses: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &machine.namespace().unwrap_or_default(),
        &ipam::address_resource(ctx.capi),
    );
    let (mut missing, mut pending, mut bound) = (Vec::new(), Vec::new(), Vec::new());
    for plan in plans {
        let Some(claim) = get_opt(&claims, &plan.name, "IPAddressClaim").await? else {
            missing.push(plan);
            continue;
        };
        let from = format!(
            "IPAddressClaim {:?} ({} {:?})",
            plan.name, plan.pool.kind, plan.pool.name
        );
        let address_name = match ipam::claim_state(&claim) {
            ClaimState::Pending(why) => {
                pending.push(match why {
                    Some(why) => format!("{from} has no address yet: {why}"),
                    None => format!("{from} has no address yet"),
                });
                continue;
            }
            ClaimState::Bound(address_name) => address_name,
        };
        let Some(address) = get_opt(&addresses, &address_name, "IPAddress").await? else {
            pending.push(format!(
                "{from} names IPAddress {address_name:?}, which does not exist yet"
            ));
            continue;
        };
        match ipam::allocated_address(&address) {
            Ok(a) => bound.push(ClaimedAddress {
                interface_name: plan.interface_name,
                claim: plan.name,
                address: a.cidr,
                gateway: a.gateway,
            }),
            Err(why) => return Ok(Ipam::Invalid(format!("IPAddress {address_name:?} of {from} {why}"))),
        }
    }
    Ok(if !missing.is_empty() {
        Ipam::Missing(missing)
    } else if !pending.is_empty() {
        Ipam::Pending(pending.join("; "))
    } else {
        Ipam::Bound(bound)
    })
}

/// File the missing claims, owned by the machine and labelled with its cluster.
pub(super) async fn create(
    machine: &LibvirtMachine,
    cluster: &str,
    plans: &[ClaimPlan],
    ctx: &Context,
) -> Result<(), Error> {
    let claims = claims_api(machine, ctx);
    let resource = ipam::claim_resource(ctx.capi);
    for plan in plans {
        let mut claim = DynamicObject::new(&plan.name, &resource).data(serde_json::json!({
            "spec": ipam::claim_spec(cluster, &plan.pool),
        }));
        claim.metadata = ObjectMeta {
            name: Some(plan.name.clone()),
            namespace: machine.namespace(),
            labels: Some([(CLUSTER_NAME_LABEL.to_owned(), cluster.to_owned())].into()),
            owner_references: machine.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        };
        match claims.create(&PostParams::default(), &claim).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(ApiError::write(format!("IPAddressClaim {:?}", plan.name))(e).into()),
        }
    }
    Ok(())
}

/// Delete the machine's claims, so their addresses return to the pools.
pub(super) async fn release(machine: &LibvirtMachine, ctx: &Context) -> Result<(), Error> {
    let claims = claims_api(machine, ctx);
    let recorded = machine
        .status
        .iter()
        .flat_map(|s| &s.claimed_addresses)
        .map(|c| c.claim.clone());
    let mut names: Vec<String> = plans(machine).into_iter().map(|p| p.name).chain(recorded).collect();
    names.sort();
    names.dedup();
    for name in names {
        match claims.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(ApiError::write(format!("IPAddressClaim {name:?} (delete)"))(e).into()),
        }
    }
    Ok(())
}

/// `spec` with the claimed addresses added to their interfaces, and a claimed gateway where the
/// interface names none of that family.
pub(super) fn effective_spec<'a>(
    spec: &'a LibvirtMachineSpec,
    claimed: &[ClaimedAddress],
) -> Cow<'a, LibvirtMachineSpec> {
    if claimed.is_empty() {
        return Cow::Borrowed(spec);
    }
    let mut out = spec.clone();
    for n in out.network.iter_mut().chain(out.networks.iter_mut()) {
        for c in claimed.iter().filter(|c| c.interface_name == n.interface_name) {
            n.addresses.push(c.address.clone());
            let Some(gateway) = &c.gateway else { continue };
            let slot = if gateway.contains(':') {
                &mut n.ipv6_gateway
            } else {
                &mut n.gateway
            };
            if slot.is_none() {
                *slot = Some(gateway.clone());
            }
        }
    }
    Cow::Owned(out)
}

/// `status.claimedAddresses` of `machine`.
pub(super) fn recorded(machine: &LibvirtMachine) -> &[ClaimedAddress] {
    machine.status.as_ref().map_or(&[], |s| s.claimed_addresses.as_slice())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn machine(networks: serde_json::Value) -> LibvirtMachine {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "LibvirtMachine",
            "metadata": {"name": "w", "namespace": "ns", "uid": "u"},
            "spec": {
                "hostRef": {"name": "h"},
                "rootDisk": {"size": "1Gi", "storagePool": "p", "baseImage": "b"},
                "networks": networks,
            },
        }))
        .unwrap()
    }

    fn pool(name: &str) -> serde_json::Value {
        json!({"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": name})
    }

    #[test]
    fn one_claim_per_interface_and_pool_named_by_position() {
        let m = machine(json!([
            {"type": "network", "name": "default", "dhcp": true},
            {"type": "bridge", "name": "br0", "interfaceName": "enp2s0",
             "addressesFromPools": [pool("v4"), pool("v6")]},
        ]));
        let names: Vec<(String, String, String)> = plans(&m)
            .into_iter()
            .map(|p| (p.name, p.interface_name, p.pool.name))
            .collect();
        assert_eq!(
            names,
            [
                ("w-1-0".to_owned(), "enp2s0".to_owned(), "v4".to_owned()),
                ("w-1-1".to_owned(), "enp2s0".to_owned(), "v6".to_owned()),
            ]
        );
    }

    #[test]
    fn claimed_addresses_join_their_interface_and_fill_only_missing_gateways() {
        let m = machine(json!([
            {"type": "bridge", "name": "br0", "addressesFromPools": [pool("v4"), pool("v6")]},
            {"type": "bridge", "name": "br1", "interfaceName": "enp2s0", "addresses": ["192.0.2.5/24"],
             "gateway": "192.0.2.1", "addressesFromPools": [pool("more")]},
        ]));
        let claimed = |interface: &str, address: &str, gateway: &str| ClaimedAddress {
            interface_name: interface.to_owned(),
            claim: format!("c-{address}"),
            address: address.to_owned(),
            gateway: Some(gateway.to_owned()),
        };
        let spec = effective_spec(
            &m.spec,
            &[
                claimed("enp1s0", "10.0.0.7/24", "10.0.0.1"),
                claimed("enp1s0", "fd00::7/64", "fd00::1"),
                claimed("enp2s0", "192.0.2.9/24", "192.0.2.254"),
            ],
        );
        let first = &spec.networks[0];
        assert_eq!(first.addresses, ["10.0.0.7/24", "fd00::7/64"]);
        assert_eq!(first.gateway.as_deref(), Some("10.0.0.1"));
        assert_eq!(first.ipv6_gateway.as_deref(), Some("fd00::1"));
        let second = &spec.networks[1];
        assert_eq!(second.addresses, ["192.0.2.5/24", "192.0.2.9/24"]);
        assert_eq!(second.gateway.as_deref(), Some("192.0.2.1"), "the spec's gateway wins");
        assert!(matches!(effective_spec(&m.spec, &[]), Cow::Borrowed(_)));
    }
}
