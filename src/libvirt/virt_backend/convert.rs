//! Reading the `virt` crate's values: libvirt error codes as the cases the backend treats
//! apart, domain states, and version numbers.

use virt::domain::DomainState as VirtState;
use virt::enumutil::Enum;
use virt::error::{Error as VirtError, ErrorNumber};

use crate::libvirt::hypervisor::DomainState;

pub(super) fn code_of(e: &VirtError) -> Option<ErrorNumber> {
    match e.code() {
        Enum::Known(k) => Some(k),
        Enum::Unknown(_) => None,
    }
}

pub(super) fn code_name(e: &VirtError) -> String {
    match e.code() {
        Enum::Known(k) => format!("{k:?}"),
        Enum::Unknown(n) => n.to_string(),
    }
}

pub(super) fn is_code(e: &VirtError, code: ErrorNumber) -> bool {
    code_of(e) == Some(code)
}

/// The driver rejected the flags we passed (the test driver does for NVRAM and VALIDATE).
pub(super) fn is_unsupported_flags(e: &VirtError) -> bool {
    matches!(code_of(e), Some(ErrorNumber::InvalidArg | ErrorNumber::NoSupport))
        && e.message().contains("unsupported flags")
}

pub(super) fn is_already_exists(e: &VirtError) -> bool {
    matches!(code_of(e), Some(ErrorNumber::DomExist | ErrorNumber::StorageVolExist))
        || (is_code(e, ErrorNumber::OperationFailed)
            && (e.message().contains("already exists") || e.message().contains("already defined")))
}

pub(super) fn convert_state(s: virt::domain::DomainStateEnum) -> DomainState {
    match s {
        Enum::Known(VirtState::NoState) => DomainState::NoState,
        Enum::Known(VirtState::Running) => DomainState::Running,
        Enum::Known(VirtState::Blocked) => DomainState::Blocked,
        Enum::Known(VirtState::Paused) => DomainState::Paused,
        Enum::Known(VirtState::Shutdown) => DomainState::ShuttingDown,
        Enum::Known(VirtState::Shutoff) => DomainState::Shutoff,
        Enum::Known(VirtState::Crashed) => DomainState::Crashed,
        Enum::Known(VirtState::PMSuspended) => DomainState::PmSuspended,
        Enum::Unknown(_) => DomainState::Unknown,
    }
}

/// `major * 1_000_000 + minor * 1_000 + release` → `major.minor.release`.
pub(super) fn version_string(v: u32) -> String {
    format!("{}.{}.{}", v / 1_000_000, (v / 1_000) % 1_000, v % 1_000)
}
