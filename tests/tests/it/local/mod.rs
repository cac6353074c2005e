//! Checks that need the local services running (`scripts/services.sh start`).

mod hot_device_resharding;
mod local_services_listen_on_loopback;
