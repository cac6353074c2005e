//! Tests against the local emulators.

mod designs_local;
mod meter_local;
