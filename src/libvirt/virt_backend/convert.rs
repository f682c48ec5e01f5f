//! Reading the `virt` crate's values: libvirt error codes as the cases the backend treats
//! apart, domain states and their reasons, and version numbers; and the errors the backend
//! builds itself.

use virt::domain::{DomainShutoffReason, DomainState as VirtState, DomainStateReason, DomainStateReasonEnum};
use virt::enumutil::Enum;
use virt::error::{Error as VirtError, ErrorNumber};

use crate::libvirt::hypervisor::{DomainState, HypervisorError, ObjectKind, StopReason};

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

/// Why a domain in `state` stopped, from the reason `virDomainGetState` gave; `None` while it
/// is active.
pub(super) fn stop_reason(state: DomainState, reason: DomainStateReasonEnum) -> Option<StopReason> {
    if state.is_active() {
        return None;
    }
    Some(match reason {
        Enum::Known(DomainStateReason::Crashed(_)) => StopReason::Crashed,
        Enum::Known(DomainStateReason::Shutoff(Enum::Known(why))) => match why {
            DomainShutoffReason::Shutdown => StopReason::ShutDown,
            DomainShutoffReason::Crashed => StopReason::Crashed,
            DomainShutoffReason::Destroyed => StopReason::Destroyed,
            _ => StopReason::Other,
        },
        _ => StopReason::Other,
    })
}

/// `major * 1_000_000 + minor * 1_000 + release` → `major.minor.release`.
pub(super) fn version_string(v: u32) -> String {
    format!("{}.{}.{}", v / 1_000_000, (v / 1_000) % 1_000, v % 1_000)
}

/// A volume that is already there.
pub(super) fn volume_exists_error(pool: &str, name: &str) -> HypervisorError {
    HypervisorError::AlreadyExists {
        kind: ObjectKind::Volume,
        name: format!("{pool}/{name}"),
    }
}

/// The test driver's local-file stand-in for a stream failed.
pub(super) fn emulation_error(operation: &'static str, e: &std::io::Error) -> HypervisorError {
    HypervisorError::Unsupported {
        operation,
        message: format!("test driver has no streams and the local fallback failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use virt::domain::{DomainCrashedReason, DomainCrashedReasonEnum, DomainRunningReason, DomainShutoffReasonEnum};

    use super::*;

    fn shutoff(why: DomainShutoffReason) -> DomainStateReasonEnum {
        Enum::Known(DomainStateReason::Shutoff(DomainShutoffReasonEnum::Known(why)))
    }

    #[test]
    fn stop_reasons_follow_libvirts_state_reason() {
        let off = DomainState::Shutoff;
        assert_eq!(
            stop_reason(off, shutoff(DomainShutoffReason::Shutdown)),
            Some(StopReason::ShutDown)
        );
        assert_eq!(
            stop_reason(off, shutoff(DomainShutoffReason::Crashed)),
            Some(StopReason::Crashed)
        );
        assert_eq!(
            stop_reason(off, shutoff(DomainShutoffReason::Destroyed)),
            Some(StopReason::Destroyed)
        );
        assert_eq!(
            stop_reason(off, shutoff(DomainShutoffReason::Failed)),
            Some(StopReason::Other)
        );
        assert_eq!(stop_reason(off, Enum::Unknown(99)), Some(StopReason::Other));
        let crashed = Enum::Known(DomainStateReason::Crashed(DomainCrashedReasonEnum::Known(
            DomainCrashedReason::Panicked,
        )));
        assert_eq!(stop_reason(DomainState::Crashed, crashed), Some(StopReason::Crashed));
        let booted = Enum::Known(DomainStateReason::Running(Enum::Known(DomainRunningReason::Booted)));
        assert_eq!(
            stop_reason(DomainState::Running, booted),
            None,
            "a running domain has not stopped"
        );
    }
}
