//! Tests against the local emulators.

mod fault_proxy;
