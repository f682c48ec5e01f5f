//! Hypervisor-side logic. So far: how a LibvirtMachine's identity (node name, domain UUID,
//! provider ID) is derived, shared by the controller and `caplv-manager ignition render`.

pub mod identity;
